"""Diagnosis only (issue 31, helper qwen-moe, session 26): ``benchmarks/silicon_rows.py``
with the InferenceMAX -mtp acceptance and SGLang's spec-v1 loop host time patched in this
process (and its forked workers), to score a (acceptance, loop host) point without editing
the tree. Run from the repository root:

    ACC=0.66 LOOP=0.25e-3,120e-6 PYTHONPATH=. python \\
        benchmarks/results/qwen-moe/patched_rows.py ROWS.csv --split fit --out DIR --jobs 1
"""

import os
import sys

sys.path.insert(0, "benchmarks")

import silicon_rows

import twin.engine.sglang_speculation as sglang_speculation
import twin.validate.silicon.inferencemax as im
import twin.validate.silicon.inferencemax_sglang as ims

if os.environ.get("ACC"):
    a = float(os.environ["ACC"])
    im.INFERENCEMAX_MTP_ACCEPTANCE = (a, a)
    ims._QWEN35_MTP["speculative_acceptance"] = im.inferencemax_mtp_acceptance(3)
    ims._SGLANG_MTP["speculative_acceptance"] = im.inferencemax_mtp_acceptance(2)
    print("acceptance", ims._QWEN35_MTP["speculative_acceptance"], flush=True)
if os.environ.get("LOOP"):
    fixed, each = (float(x) for x in os.environ["LOOP"].split(","))
    sglang_speculation.SGLANG_SPEC_V1_LOOP_HOST = (fixed, each)
    print("loop host", sglang_speculation.SGLANG_SPEC_V1_LOOP_HOST, flush=True)
sys.exit(silicon_rows.main(sys.argv[1:]))
