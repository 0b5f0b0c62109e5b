#!/usr/bin/env bash
# The front-end grid on every H200 vLLM fit row (full measured set), merge-stage rules in place.
# Usage (from the worktree root): benchmarks/results/vllm-fe/grid.sh V_SECONDS...
set -e
for v in "$@"; do
  PYTHONPATH=. nice -n 5 /work/main/.venv/bin/python benchmarks/silicon_rows.py \
    benchmarks/results/vllm-fe/full-fit-before/predictions.csv --split fit \
    --deployment frontend_s="$v" --out benchmarks/results/vllm-fe/fit-fe-"$v" --jobs 2
done
