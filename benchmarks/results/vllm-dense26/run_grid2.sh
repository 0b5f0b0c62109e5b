set -x
while pgrep -f "run_grid.sh" >/dev/null; do sleep 5; done
D=benchmarks/results/vllm-dense26/b200
R="env PYTHONPATH=. nice -n 5 /work/main/.venv/bin/python benchmarks/silicon_rows.py"
for v in 0.064 0.080; do
$R $D/fit-before.csv --split fit --out $D/grid-$v --jobs 2 --deployment eager_prefill_s=$v --deployment eager_graph_tokens=0 --deployment eager_overlap=true
done
