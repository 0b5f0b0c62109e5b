set -x
D=benchmarks/results/vllm-dense26/b200
R="env PYTHONPATH=. nice -n 5 /work/main/.venv/bin/python benchmarks/silicon_rows.py"
for v in 0.048 0.040 0.056; do
$R $D/fit-before.csv --split fit --out $D/grid-$v --jobs 2 --deployment eager_prefill_s=$v --deployment eager_graph_tokens=0 --deployment eager_overlap=true
done
