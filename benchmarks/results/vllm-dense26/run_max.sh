set -x
D=benchmarks/results/vllm-dense26
R="env PYTHONPATH=. nice -n 5 /work/main/.venv/bin/python benchmarks/silicon_rows.py"
for m in 1.0 1.5; do
VD_MAX=$m $R $D/llama-rows.csv --split fit --out $D/llama-fit-max$m --jobs 2
VD_MAX=$m $R $D/l8b-rows.csv --split fit --out $D/l8b-fit-max$m --jobs 2
done
