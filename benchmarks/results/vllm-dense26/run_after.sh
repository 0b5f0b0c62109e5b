set -x
D=benchmarks/results/vllm-dense26/b200
R="env PYTHONPATH=. nice -n 5 /work/main/.venv/bin/python benchmarks/silicon_rows.py"
$R $D/fit-before.csv --split fit --out $D/fit-after --jobs 2
$R $D/held-before.csv --split held_out --out $D/held-after --jobs 2
