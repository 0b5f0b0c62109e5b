set -x
D=benchmarks/results/vllm-dense26
R="env PYTHONPATH=. nice -n 5 /work/main/.venv/bin/python benchmarks/silicon_rows.py"
$R $D/l8b-rows.csv --split fit --out $D/l8b-fit-before --jobs 2
$R $D/l8b-rows.csv --split fit --out $D/l8b-fit-series --jobs 2 --deployment eager_prefill_s=0.032 --deployment eager_graph_tokens=0
$R $D/l8h1-rows.csv --split fit --out $D/l8h1-fit-before --jobs 2
$R $D/l8h1-rows.csv --split fit --out $D/l8h1-fit-series --jobs 2 --deployment eager_prefill_s=0.0192 --deployment eager_graph_tokens=512
$R $D/l8h2-rows.csv --split fit --out $D/l8h2-fit-before --jobs 2
$R $D/l8h2-rows.csv --split fit --out $D/l8h2-fit-series --jobs 2 --deployment eager_prefill_s=0.0448 --deployment eager_graph_tokens=512
