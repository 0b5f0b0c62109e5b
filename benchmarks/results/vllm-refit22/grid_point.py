"""Rescore rows (``benchmarks/silicon_rows.py``) with B200's or B300's vLLM host time per
eager launch set for this run only (helper ``vllm-refit22``, issue 31: the joint refit of
``VLLM_EAGER_LAUNCH_S`` and ``engine_times.json``'s ``frontend_s``, which goes in through
``silicon_rows.py --deployment frontend_s=V``). Planning runs in this process, so the
patched table prices every plan's ``eager_prefill_s``.

    PYTHONPATH=.:benchmarks python benchmarks/results/vllm-refit22/grid_point.py GPU US \\
        IDS.csv --split fit --deployment frontend_s=0.01 --out DIR --jobs 2
"""

import sys

import silicon_rows

import twin.validate.silicon as sil

gpu, us = sys.argv[1], float(sys.argv[2])
sil.VLLM_EAGER_LAUNCH_S[gpu] = us * 1e-6
print(f"VLLM_EAGER_LAUNCH_S[{gpu!r}] = {us} us", flush=True)
sys.exit(silicon_rows.main(sys.argv[3:]))
