"""InferenceMAX's SGLang server scripts: the flags of its DeepSeek-R1 and Qwen3.5
servers, by image and configuration, and which of them turn SGLang's piecewise prefill
graphs off."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.validate.silicon.harness import cold_server, inferencemax_row, measured_on, model_named
from twin.validate.silicon.inferencemax import inferencemax_deepseek, inferencemax_mtp_acceptance

if TYPE_CHECKING:
    from twin.validate.silicon.rows import SiliconRow


# InferenceMAX's SGLang servers for DeepSeek-R1 (image lmsysorg/sglang:v0.5.9-cu130;
# ``nvidia-master.yaml`` and the scripts at commit 12ba0ae). Each configuration's search
# space says which rows it ran; a row only one covers ran with its script's flags:
# - ``dsr1-fp4-b200-sglang`` (tp 4 and 8, 4-128 clients; 8k/1k at tp 8: 4-16),
#   ``dsr1_fp4_b200.sh``: ``--max-running-requests 256 --mem-fraction-static 0.85
#   --chunked-prefill-size 16384``;
# - ``dsr1-fp8-b200-sglang`` (tp 8: 4-64 clients at 1k/1k and 1k/8k, 4 at 8k/1k; tp 4:
#   8k/1k at 4-32), ``dsr1_fp8_b200.sh``: tp 8 128 requests, 0.82, 32768 chunk and
#   prefill tokens; tp 4 32, 0.95, 8192;
# - ``dsr1-fp8-b200-sglang-mtp`` (tp 8, 4-512 clients), ``dsr1_fp8_b200_mtp.sh``: 512
#   requests, 0.82, 16384, and EAGLE over the model's MTP layer with 2 steps, top-k 1 and 3
#   draft tokens (SGLang's NEXTN). At the points both fp8 configurations cover (tp 8,
#   4-64 clients; 4 at 8k/1k) 2026-03-25.csv holds two measurements, one a run of each
#   (their lengths, clients, image and day are the same). The CI database's rows name
#   the plain configuration's runs (``config_id=87``: tp 8 at 4-64 clients, 4 at 8k/1k,
#   its search space; 271 its tp 4 rows) and never the -mtp one's; so a measurement at
#   such a point that the database names 87 is plain, and one where the database names
#   another measurement of the point 87 is the -mtp run (``_dsr1_fp8_mtp_run``; TPOT
#   6.7 against 8.8 ms and TTFT 207 against 183 ms at 1k/1k and 4 clients, the drafts'
#   shorter steps and longer prefill). Where the database names none: plain;
# - ``dsr1-fp8-h200-sglang`` (tp 8, 4-64 clients), ``dsr1_fp8_h200.sh``: 512 requests at
#   1k/1k, else 256; 32768; 0.82.
# The B200 scripts poll for requests every 30 decode iterations from 16 clients, else 10
# (``--scheduler-recv-interval``; 10 at fp8 tp 4). A row no configuration covers runs with
# SGLang's defaults.
# Two more eras of the same configurations:
# - B300, image lmsysorg/sglang:v0.5.10.post1-cu130 (``nvidia-master.yaml`` at e8924a6,
#   2026-04-18; scripts added 2026-04-17, 9ebeafb and 5b302f1): ``dsr1_fp4_b300.sh`` is
#   the B200 fp4 recipe as is ("reuses the existing DSR1 FP4 B200 SGLang recipe": 256
#   requests, 0.85, 16384, the same polling, ``--enable-symm-mem``), run at tp 4 and 8 over
#   the same clients; ``dsr1_fp8_b300.sh`` the B200 fp8 one (tp 8: 128, 0.82, 32768; tp 4
#   at 8k/1k: 32, 0.95, 8192), ``dsr1-fp8-b300-sglang`` at tp 8 for 4-64 clients at 1k/1k
#   and 4 at 8k/1k, tp 4 for 4-32 at 8k/1k. Its -mtp configuration (tp 8, 4-512 clients at
#   1k/1k and 8k/1k, ``dsr1_fp8_b300_mtp.sh``) shares image and layout: rows both cover
#   run plain, rows only it covers run SGLang's defaults (its drafts are not read here).
# - Rows without a release (:func:`inferencemax_sglang_unnamed`): the configurations'
#   image from 2025-11-10 (d8fe8f73e) was lmsysorg/sglang:v0.5.5-cu129-amd64, with
#   ``benchmarks/dsr1_fp4_b200_docker.sh`` (256 requests, 0.85, 16384, the same polling,
#   ``--enable-symm-mem``; the same limits before, at e06929c) over the fp4 configuration
#   of today, and ``benchmarks/dsr1_fp8_b200_docker.sh`` (128, 0.82, 32768 chunk and
#   prefill tokens, the same polling; at 189ae51, 2025-11-18) over tp 8 at 4-64 clients
#   for all three lengths (no tp 4 and no -mtp configuration yet). Before the fp4
#   configuration's search space (17d5e204f, 2025-11-03, ``nvidia-master.yaml``: tp 8 at
#   8k/1k to 16 clients) its job was ``dsr1-tmpl.yml`` ``bmk-b200-fp4`` (image
#   v0.5.3rc1-cu129-b200): ``tp-list [4,8]``, ``conc-list [4, 8, 16, 32, 64, 128]`` over
#   every length, the same script (4b860b78e: 256, 0.85, 16384, the same polling), so the
#   2025-11-02 rows at tp 8, 8k/1k, 32-128 clients ran it too.
# - B200 rows of release 0.5.6 (:data:`INFERENCEMAX_SGLANG_B200_0506`): d27433dff
#   (2025-12-31 15:17 UTC, #276) moved both B200 configurations (and H200's) from image
#   v0.5.5-cu129-amd64 to lmsysorg/sglang:v0.5.6-cu129-amd64, their search spaces as the
#   v0.5.5 era's (fp4: tp 4 and 8 at 4-128 clients, tp 8 at 8k/1k to 16; fp8: tp 8 at 4-64
#   over all three lengths), until 12ba0ae07 (2026-03-25) moved them to v0.5.9. The
#   scripts at d27433dff are that era's: ``benchmarks/dsr1_fp8_b200_docker.sh`` and
#   ``dsr1_fp8_b200_slurm.sh`` (the ``b200`` label named both node kinds from ea181ae6d,
#   that morning) ``--max-running-requests 128 --mem-fraction-static 0.82
#   --chunked-prefill-size 32768 --max-prefill-tokens 32768``, the same polling;
#   ``dsr1_fp4_b200_{docker,slurm}.sh`` 256, 0.85, 16384. So they read as the unnamed rows.
INFERENCEMAX_SGLANG_VERSION = "0.5.9"
INFERENCEMAX_SGLANG_B200_0506 = "0.5.6"
INFERENCEMAX_FP4_SEARCH_SPACE_DAY = "2025-11-03"  # 17d5e204f (above)
INFERENCEMAX_SGLANG_B300 = "0.5.10.post1"
# The day InferenceMAX's configurations first name an SGLang 0.5.10 image (6cb8291,
# 2026-04-14: ``git log -S sglang:v0.5.10 -- .github/configs/nvidia-master.yaml``).
# The CSV's SGLang rows without a ``backend_version`` (DeepSeek-R1 on B200, measured
# 2025-11-02 to 2025-12-05 by their ``measured=``; no ``image=``) ran before it.
INFERENCEMAX_FIRST_SGLANG_0510 = "2026-04-14"


def inferencemax_sglang_unnamed(row: SiliconRow) -> bool:
    """Whether ``row`` is an InferenceMAX SGLang row that names no release and was
    measured before InferenceMAX first ran an SGLang 0.5.10 image (so it ran an earlier
    release: ``INFERENCEMAX_FIRST_SGLANG_0510``)."""
    if not inferencemax_row(row, "sglang") or row.backend_version:
        return False
    day = measured_on(row)
    return day is not None and day < INFERENCEMAX_FIRST_SGLANG_0510


# Flags of InferenceMAX's DeepSeek SGLang scripts under which SGLang 0.5.10.post1 turns
# its piecewise prefill graphs off (``server_args.py``): ``--enable-symm-mem`` (every fp4
# script: ``dsr1_fp4_b200.sh`` at 12ba0ae and e8924a6, ``dsr1_fp4_b300.sh`` at e8924a6;
# ``_handle_piecewise_cuda_graph`` condition 15, "torch.cuda.use_mem_pool is untraceable
# by dynamo") and ``--moe-runner-backend flashinfer_trtllm`` (every B200 and B300 script,
# fp4 and fp8, plain and -mtp, at both commits; the H200 one passes no runner;
# ``_handle_moe_kernel_config``: "bypassed topk is incompatible with torch.compile", for
# every architecture but gpt-oss's). By GPU: the scripts that pass at least one of them.
INFERENCEMAX_NO_PIECEWISE_SYSTEMS = frozenset({"b200_sxm", "b300_sxm"})


def inferencemax_no_piecewise(row: SiliconRow) -> bool:
    """Whether ``row``'s InferenceMAX SGLang server passed a flag that turns SGLang's
    piecewise prefill graphs off (above)."""
    deepseek = inferencemax_row(row, "sglang") and inferencemax_deepseek(row)
    return deepseek and row.system in INFERENCEMAX_NO_PIECEWISE_SYSTEMS


# The plain ``dsr1-fp8-b200-sglang`` configuration's tp 8 runs in the CI database (above).
INFERENCEMAX_DSR1_FP8_B200_PLAIN = "87"


def _dsr1_fp8_mtp_run(row: SiliconRow) -> bool:
    """Whether ``row`` is the -mtp configuration's run at a point the plain one shares:
    the CI database names another measurement of the point as the plain run (above)."""
    plain = INFERENCEMAX_DSR1_FP8_B200_PLAIN
    return plain in row.point_configs and plain not in row.named_configs


_SGLANG_FLAGS = (
    "max_running_requests",
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "scheduler_recv_interval",
)


_SGLANG_MTP = {
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": "2",
    "speculative_eagle_topk": "1",
    "speculative_num_draft_tokens": "3",
    "speculative_acceptance": inferencemax_mtp_acceptance(2),
}


# InferenceMAX's SGLang servers for Qwen3.5-397B-A17B (its ``qwen3.5-*-sglang``
# configurations in ``.github/configs/nvidia-master.yaml`` and their scripts
# ``benchmarks/single_node/qwen3.5_<precision>_<gpu>[_mtp].sh``, read at the commits of
# the three collections: 12ba0ae (2026-03-25), 51e31df (2026-04-06) and e8924a6
# (2026-04-18, the db-dump rows' measurement date); the flags are the same at all three
# where a script exists). Every script runs ``--disable-radix-cache`` (so SGLang keeps its
# overlap scheduler: a hybrid model turns it off only with the radix cache on,
# ``server_args.py`` ``_handle_mamba_radix_cache``, 0.5.9 and 0.5.10.post1), and:
# - B200 fp8 (image v0.5.9) and bf16 (nightly-dev-20260216), ``qwen3.5_{fp8,bf16}_b200.sh``:
#   ``--max-running-requests 128 --mem-fraction-static 0.82 --chunked-prefill-size 32768
#   --max-prefill-tokens 32768``, the scheduler polling for requests every 10 iterations
#   below 16 clients, else 30 (``--scheduler-recv-interval``); B200 fp4 (nightly-dev-20260402,
#   ``qwen3.5_fp4_b200.sh``) the same at 0.85; B300 bf16 and fp4 (v0.5.10.post1) the same
#   at 0.82 and 0.8;
# - B200 fp8 at tp 4 without expert parallelism is the ``-mtp`` configuration (the plain one
#   runs tp 8 and tp 4 with ep 4; the -mtp one tp 4 ep 1 up to 256 clients),
#   ``qwen3.5_fp8_b200_mtp.sh``: ``--max-running-requests $CONC --mem-fraction-static 0.8``,
#   the same chunk and polling, and EAGLE over the model's own MTP layer ("MTP
#   (Multi-Token Prediction) Config - EAGLE speculative decoding"; SGLang's NEXTN) with 3
#   steps, top-k 1 and 4 draft tokens;
# - H200 fp8 (v0.5.9), ``qwen3.5_fp8_h200.sh``: ``--max-running-requests 128
#   --chunked-prefill-size 16384 --mem-fraction-static 0.8``, polling every iteration;
# - B300 fp8 (v0.5.10.post1), ``qwen3.5_fp8_b300.sh``: ``--max-running-requests $CONC
#   --chunked-prefill-size 16384 --max-prefill-tokens 16384 --mem-fraction-static 0.8
#   --scheduler-recv-interval 10``.
# Where a plain and an -mtp configuration share image and layout (H200 fp8, B200 bf16 and
# fp4, B300 fp8 from 2026-04-18) the rows cannot be told apart and run plain, as for
# DeepSeek.
# The B300 v0.5.9 rows of 2026-03-25.csv (``wip=True``, measured 2026-04-03) have no B300
# configuration on the main branch then: B300's first Qwen3.5 ones came on 2026-04-16/17
# (28752f613 -mtp, c0f62a2ef plain, both image v0.5.10.post1). Their images and search
# spaces are the B200 fp8 configurations' of 12ba0ae, row for row: tp 8 ep 1 at 4-16
# clients and tp 4 ep 4 at 16-128 under ``v0.5.9-cu130-amd64`` (``qwen3.5-fp8-b200-sglang``)
# and tp 4 ep 1 at 4-256 under ``v0.5.9-cu130`` (``qwen3.5-fp8-b200-sglang-mtp``). So they
# are the B200 configurations run on a B300 runner, and read as those (_QWEN35_SAME_AS):
# the tp 4 ep 1 rows draft (their TPOT at 4 clients, 5.3 ms, is 0.67 of the tp 8 rows'
# 7.9, as B200's -mtp 6.3 against 8.3 ms).
_QWEN35_FLAGS = ("disable_radix_cache", *_SGLANG_FLAGS)
_QWEN35_MTP = {
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": "3",
    "speculative_eagle_topk": "1",
    "speculative_num_draft_tokens": "4",
    "speculative_acceptance": inferencemax_mtp_acceptance(3),
}
# (system, precision, release) -> (max_running_requests, mem_fraction_static,
# chunked_prefill_size, max_prefill_tokens, scheduler_recv_interval); "c": the clients,
# "poll": 10 below 16 clients else 30, None: not given.
# The configuration whose tp 4 / ep 1 rows are the -mtp script (_QWEN35_MTP_SCRIPT).
_QWEN35_MTP_KEY = ("b200_sxm", "fp8", "0.5.9")
_QWEN35_SCRIPTS: dict[tuple[str, str, str], tuple[str, str, str, str | None, str | None]] = {
    _QWEN35_MTP_KEY: ("128", "0.82", "32768", "32768", "poll"),
    ("b200_sxm", "bf16", "nightly-dev"): ("128", "0.82", "32768", "32768", "poll"),
    ("b200_sxm", "fp4", "nightly-dev-20260402"): ("128", "0.85", "32768", "32768", "poll"),
    ("h200_sxm", "fp8", "0.5.9"): ("128", "0.8", "16384", None, None),
    ("b300_sxm", "bf16", "0.5.10.post1"): ("128", "0.82", "32768", "32768", "poll"),
    ("b300_sxm", "fp4", "0.5.10.post1"): ("128", "0.8", "32768", "32768", "poll"),
    ("b300_sxm", "fp8", "0.5.10.post1"): ("c", "0.8", "16384", "16384", "10"),
}
_QWEN35_MTP_SCRIPT = ("c", "0.8", "32768", "32768", "poll")
# Rows another GPU's configurations ran (above): (system, precision, release) -> the key
# of the configuration they ran.
_QWEN35_SAME_AS = {("b300_sxm", "fp8", "0.5.9"): _QWEN35_MTP_KEY}


# InferenceMAX's Qwen3.5 SGLang rows whose ``backend_version`` reads ``nightly-dev`` (no
# day: the B200 bf16 configuration's) ran the image nightly-dev-20260216 (above;
# ``qwen3.5_bf16_b200.sh``): the build whose kernels ran. (Its GLM-5 ``nightly-dev`` rows
# are not read: their build stays as the CSV names it.)
INFERENCEMAX_QWEN35_NIGHTLY = "nightly-dev-20260216"


def inferencemax_sglang_build(row: SiliconRow) -> str | None:
    """The image an InferenceMAX Qwen3.5 SGLang row that names only ``nightly-dev`` ran
    (above); ``None`` for every other row."""
    if row.backend != "sglang" or row.backend_version != "nightly-dev":
        return None
    if not inferencemax_row(row) or model_named(row, ("qwen3.5-397b",)) is None:
        return None
    return INFERENCEMAX_QWEN35_NIGHTLY


def inferencemax_qwen35(row: SiliconRow) -> dict[str, str]:
    """The ``--set`` flags of InferenceMAX's SGLang server for a Qwen3.5-397B row (above);
    empty where no configuration covers it."""
    if model_named(row, ("qwen3.5-397b",)) is None:
        return {}
    release = row.backend_version
    if release.startswith("nightly-dev"):  # the image's date names the configuration
        release = "nightly-dev-20260402" if "20260402" in release else "nightly-dev"
    key = (row.system, row.precision, release)
    key = _QWEN35_SAME_AS.get(key, key)
    flags = _QWEN35_SCRIPTS.get(key)
    if flags is None:
        return {}
    conc = row.concurrency or 0
    mtp = key == _QWEN35_MTP_KEY and ((row.tp or 1, row.moe_ep or 1) == (4, 1))
    if mtp:
        flags = _QWEN35_MTP_SCRIPT
    given = ("true", *flags)
    poll = "30" if conc >= 16 else "10"
    out: dict[str, str] = {}
    for name, value in zip(_QWEN35_FLAGS, given, strict=True):
        if value is not None:
            out[name] = {"c": str(conc), "poll": poll}.get(value, value)
    return {**out, **(_QWEN35_MTP if mtp else {})}


# InferenceMAX's GLM-5 SGLang servers (``glm5-*-sglang`` in ``.github/configs/
# nvidia-master.yaml``, scripts ``benchmarks/single_node/glm5_<precision>_<gpu>.sh``). The
# CSV's rows of each group share one image and one day (``image=`` and ``measured=`` of
# their source), and every one was measured before InferenceMAX's first GLM-5 ``-mtp``
# configuration (1e010efd6 / d2430ae9f / 049051f99, 2026-04-18), so each ran its plain
# script, read at the commit of its image:
# - H200 fp8 (``glm5-fp8-h200-sglang``: image lmsysorg/sglang:glm5-hopper, the CSV's
#   ``glm5-hopper`` rows, tp 8 at 4-64 clients over 1k/1k, 1k/8k and 8k/1k; the same at
#   12ba0ae and 51e31df), ``glm5_fp8_h200.sh``: ``--mem-fraction-static 0.85`` and nothing
#   else that sizes the server: no ``--kv-cache-dtype`` (so SGLang's default for a
#   DeepSeek-sparse-attention model on Hopper, bf16: ``precision.engine_default_kv``;
#   ``inferencemax_sglang_default_kv``), no chunk or running limit.
# - B200 fp8 (``glm5-fp8-b200-sglang``, added 13930ca61 2026-03-20 with image
#   nightly-dev-cu13-20260317-1eea7448, the rows' image, measured 2026-03-20; tp 8 ep 1 at
#   4-128 clients over 1k/1k, 1k/8k and 8k/1k, the rows' points), ``glm5_fp8_b200.sh`` at
#   13930ca61 (its server flags unchanged at 12ba0ae, 51e31df and e8924a6):
#   ``--max-running-requests $CONC --mem-fraction-static 0.85 --chunked-prefill-size 32768
#   --max-prefill-tokens 32768 --disable-radix-cache``, ``--kv-cache-dtype fp8_e4m3``, no
#   ``--scheduler-recv-interval`` (SGLang's 1).
# - B200 fp4 (``glm5-nvfp4-b200-sglang``, added d43805fc3 2026-03-28 with image
#   nightly-dev-cu13-20260328-a27651d5, the rows' image, measured 2026-03-29; tp 8 ep 1 at
#   4-64 clients over 1k/1k and 8k/1k; renamed ``glm5-fp4-b200-sglang`` by 800f57aaf),
#   ``glm5_nvfp4_b200.sh`` at d43805fc3 (``glm5_fp4_b200.sh`` the same at 51e31df):
#   ``--max-running-requests $CONC --mem-fraction-static 0.80 --chunked-prefill-size
#   131072``, no ``--max-prefill-tokens`` (SGLang's 16,384), the radix cache on (no
#   ``--disable-radix-cache``) and no ``--kv-cache-dtype`` (SGLang's default for a
#   sparse-attention model on Blackwell, fp8: the same cache as the pairing). Its later
#   script (475cc1dbc, 2026-04-09: 0.9, ``--disable-radix-cache``, tp 4) ran a later image.
# - B300 fp8 (image nightly-dev-cu13-20260401-b6fe0cca, measured 2026-04-03, ``wip=True``;
#   1k/1k and 8k/1k at tp 8, 4-128 clients): no B300 GLM-5 configuration was on the main
#   branch then (the first, ``glm5-fp8-b300-sglang``, 6c66a00d9 2026-04-17, image
#   v0.5.10.post1), and no commit of it names that image. Its points are the B200 fp8
#   configuration's of that day (1k/8k dropped by 626932a11, 2026-03-27), and
#   ``glm5_fp8_b300.sh`` when it came "reuses the existing GLM5 FP8 B200 SGLang recipe
#   as-is" (its server flags those of ``glm5_fp8_b200.sh``, at 6c66a00d9 and e8924a6): the
#   B200 fp8 recipe, read as such (``_GLM5_SAME_AS``).
# Not modelled: ``--cuda-graph-max-bs $CONC`` (given a static memory fraction it sizes no
# pool), ``--stream-interval 30`` (delays no first token; docs/decisions.md, helper
# ``sgl-moe``), ``--attention-backend nsa --nsa-decode-backend trtllm`` (kernels),
# ``--moe-runner-backend
# flashinfer_trtllm`` and ``--enable-flashinfer-allreduce-fusion`` (kernels),
# ``SGL_ENABLE_JIT_DEEPGEMM``, the tool-call and reasoning parsers.
# Modelled: ``--nsa-prefill-backend trtllm`` of the fp8 B200 (and B300) scripts, the
# kernel of GLM-5's forced sparse-MLA prefill on Blackwell (``twin.engine.kernel_layouts_sglang.
# SGLANG_DSA_SPARSE_MODULE``; the NVFP4 script names none: SGLang's default).
# (system, precision, release) -> (max_running_requests, mem_fraction_static,
# chunked_prefill_size, max_prefill_tokens, disable_radix_cache, nsa_prefill_backend);
# "c": the clients, None: not given. Each with the highest clients its search space ran
# at tp 8.
_GLM5_FLAGS = (
    "max_running_requests",
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "disable_radix_cache",
    "nsa_prefill_backend",
)
INFERENCEMAX_GLM5_H200 = ("h200_sxm", "fp8", "glm5-hopper")
_GLM5_B200_FP8 = ("b200_sxm", "fp8", "nightly-dev")
_GLM5_SCRIPTS: dict[tuple[str, str, str], tuple[tuple[str | None, ...], int]] = {
    INFERENCEMAX_GLM5_H200: ((None, "0.85", None, None, None, None), 64),
    _GLM5_B200_FP8: (("c", "0.85", "32768", "32768", "true", "trtllm"), 128),
    ("b200_sxm", "fp4", "nightly-dev"): (("c", "0.80", "131072", None, None, None), 64),
}
_GLM5_SAME_AS = {("b300_sxm", "fp8", "nightly-dev"): _GLM5_B200_FP8}
# The scripts above that name no ``--kv-cache-dtype`` (SGLang's ``auto``).
_GLM5_DEFAULT_KV = frozenset({INFERENCEMAX_GLM5_H200, ("b200_sxm", "fp4", "nightly-dev")})


def _glm5_key(row: SiliconRow) -> tuple[str, str, str] | None:
    """The key of the GLM-5 script ``row`` ran (above); ``None`` where none covers it."""
    if model_named(row, ("glm-5",)) is None or not inferencemax_row(row, "sglang"):
        return None
    key = (row.system, row.precision, row.backend_version)
    key = _GLM5_SAME_AS.get(key, key)
    script = _GLM5_SCRIPTS.get(key)
    if script is None or row.tp != 8 or not 0 < (row.concurrency or 0) <= script[1]:
        return None
    return key


def inferencemax_glm5(row: SiliconRow) -> dict[str, str]:
    """The ``--set`` flags of InferenceMAX's GLM-5 SGLang server for ``row`` (above);
    empty where no configuration covers it."""
    key = _glm5_key(row)
    if key is None:
        return {}
    conc = str(row.concurrency)
    given = zip(_GLM5_FLAGS, _GLM5_SCRIPTS[key][0], strict=True)
    return {name: conc if value == "c" else value for name, value in given if value is not None}


# The InferenceMAX SGLang scripts read here that pass no ``--kv-cache-dtype``, so SGLang
# 0.5.9 runs its default ``auto`` (``server_args.py``; ``precision.engine_default_kv``
# prices it):
# - ``dsr1_fp8_h200.sh`` (12ba0ae and e8924a6; every B200 and B300 DeepSeek script, fp4
#   and fp8, plain and -mtp, passes ``--kv-cache-dtype fp8_e4m3``): ``auto`` is
#   ``model_executor/model_runner.py`` ``configure_kv_cache_dtype``'s fp8 only where the
#   checkpoint's quantisation config says ``kv_cache_quant_algo`` FP8, else the model's
#   dtype. DeepSeek-R1's block-fp8 config names no KV quantisation, so its H200 cache is
#   bf16, not the fp8 the weights' pairing gives;
# - ``glm5_fp8_h200.sh`` and ``glm5_nvfp4_b200.sh`` at d43805fc3 (:func:`inferencemax_glm5`):
#   a sparse-attention model, whose ``auto`` is bf16 on Hopper, fp8 on Blackwell.
INFERENCEMAX_SGLANG_DEFAULT_KV_SYSTEMS = frozenset({"h200_sxm"})


def inferencemax_sglang_default_kv(row: SiliconRow) -> bool:
    """Whether ``row`` ran an InferenceMAX SGLang script that names no KV cache dtype
    (above): only rows whose script is read (``inferencemax_sglang``)."""
    if _glm5_key(row) in _GLM5_DEFAULT_KV:
        return True
    return (
        row.system in INFERENCEMAX_SGLANG_DEFAULT_KV_SYSTEMS
        and inferencemax_deepseek(row)
        and bool(inferencemax_sglang(row))
    )


# The B300 DeepSeek SGLang rows' prompts as the server tokenized them. The image
# lmsysorg/sglang:v0.5.10.post1-cu130 pins ``transformers==5.3.0`` (the wheel's
# ``Requires-Dist``; 0.5.9 pins 4.57.1), and InferenceMAX's client runs in the server's
# image (``runners/launch_b300-nv.sh`` single-node branch at 9ebeafb4e / e8924a6: ``srun
# --container-image`` of the image, ``benchmarks/single_node/dsr1_*_b300.sh`` ->
# ``run_benchmark_serving --model "$MODEL"``). transformers 5 loads DeepSeek-R1's
# ``LlamaTokenizerFast`` with a Metaspace pre-tokenizer and a Sequence decoder in place of
# tokenizer.json's ByteLevel ones, so the random dataset's prompt text
# (``utils/bench_serving/benchmark_serving.py`` ``sample_random_requests``: decode
# ``isl`` client token ids, re-encode to ``isl``) is "~5x" longer to the server ("a
# 7000-token prompt on the client becomes ~35000 tokens on the server", ef01c2205 #937,
# 2026-03-27). #937's client-side repair (``backend_request_func.py``
# ``_fix_tokenizer_for_sglang``) reads ``Path(model)/"tokenizer.json"`` and silently does
# nothing for a Hugging Face repo id (5fe6d56ee #1381, 2026-05-15: "~5x client/server
# tokenizer mismatch ... DeepSeek-R1 FP4 on B200: 1970 -> 425 tok/s"); the B300 runner
# re-points only Qwen3.5-FP8 at a local copy, so DeepSeek's client got
# ``nvidia/DeepSeek-R1-0528-FP4-V2`` / ``deepseek-ai/DeepSeek-R1-0528``. The rows (measured
# 2026-04-17) ran before #1381. Server tokens per client token: #937's 35000 / 7000.
INFERENCEMAX_TOKENIZER_MISMATCH = 5.0
INFERENCEMAX_TOKENIZER_FIXED = "2026-05-15"  # #1381


def inferencemax_prompt_scale(row: SiliconRow) -> float:
    """Server prompt tokens per prompt token the row names (above): 5 for the B300
    SGLang 0.5.10.post1 DeepSeek rows measured before #1381, else 1."""
    day = measured_on(row)
    if (
        row.system != "b300_sxm"
        or row.backend_version != INFERENCEMAX_SGLANG_B300
        or not inferencemax_deepseek(row)
        or not inferencemax_row(row)
        or day is None
        or day >= INFERENCEMAX_TOKENIZER_FIXED
    ):
        return 1.0
    return INFERENCEMAX_TOKENIZER_MISMATCH


# How many prompts InferenceMAX's client sent a B200 DeepSeek SGLang server in its Docker
# runner's era. ``runners/launch_b200-nvd.sh`` from 15b7c00b0 (2025-10-06, "removing
# persistent cache from b200": the FlashInfer cache mount dropped in the same commit) to
# d053ae24e (2026-01-21), and ``launch_b200-dgxc.sh`` (3c3d1999b, 2025-11-29), pass
# ``--num-prompts`` ``CONC x 20`` at 8k outputs and ``CONC x 50`` otherwise where ``$MODEL``
# is ``deepseek-ai/DeepSeek-R1-0528`` (every fp8 configuration) or
# ``nvidia/DeepSeek-R1-0528-FP4`` (the fp4 SGLang job's model in ``dsr1-tmpl.yml`` until
# 17d5e204f, 2025-11-03, whose ``dsr1-fp4-b200-sglang`` names ``nvidia/DeepSeek-R1-0528-FP4-V2``,
# which the test misses: ``CONC x 10``), and no ``--num-warmups``. The ``b200`` runner label
# named only those Docker nodes until ea181ae6d (2025-12-31 06:18 UTC) let DeepSeek SGLang
# run on the Slurm nodes too (``runners.yaml``: the four ``b200-nv``/``b200-nb`` nodes beside
# the six Docker ones; ``launch_b200-nv.sh`` -> ``dsr1_fp8_b200_slurm.sh``: ``CONC x 10``);
# the Docker nodes stayed in the label (``b200-nvd_*`` to 3858fefd2, 2026-01-12, the two
# ``b200-dgxc`` after) and their launchers sent ``CONC x 50`` until d053ae24e, the day the
# client's warm-up came (``harness.INFERENCEMAX_WARMUP_FROM``). Which kind of node ran a
# row of 2025-12-31 to 2026-01-20 the data does not say (``benchmark-tmpl.yml`` ``runs-on``
# the label; the result file's runner name is not in the CSV); its one SGLang row, the fit
# row ``..._8192x1024_c64_tp8_0_ep1_0_1288`` (image v0.5.6, 2025-12-31 15:18), reads as a
# Docker node: TTFT 21.9% at 50 rounds against 175.7% at 10 (helper ``audit-sgl``,
# session 42; docs/decisions.md), so the window runs to that day. (Read by helper
# ``sgl-ds``, session 26; docs/decisions.md. It lands with the cold start below, without
# which it moved the rows away from their measurements: more rounds dilute a stall the twin
# did not have.)
INFERENCEMAX_B200_DOCKER_ROUNDS = ("2025-10-06", "2026-01-21")
INFERENCEMAX_FP4_V2_FROM = "2025-11-03"


def inferencemax_sglang_rounds(row: SiliconRow) -> int | None:
    """The prompts per client InferenceMAX's client sent ``row``'s server where its B200
    Docker runner sent other than the harness's ten (above); ``None`` otherwise."""
    day = measured_on(row)
    first, last = INFERENCEMAX_B200_DOCKER_ROUNDS
    if row.backend != "sglang" or row.system != "b200_sxm" or day is None:
        return None
    if not first <= day < last or not inferencemax_row(row):
        return None
    if not inferencemax_deepseek(row):
        return None
    precision = (row.precision or "").lower()
    if precision != "fp8" and not (precision == "fp4" and day < INFERENCEMAX_FP4_V2_FROM):
        return None
    return 20 if row.osl == 8192 else 50


# The one stall of a fresh SGLang DeepSeek server on B200 that no warm-up request reached
# (``EngineConfig.cold_prefix_stall_s``, seconds; ``twin.engine.batching.ContinuousBatching.
# _cold_stall``): the first step that extends a prompt after tokens already in its KV runs
# the MLA's chunked-prefix attention (SGLang 0.5.5 ``models/deepseek_v2.py``
# ``forward_normal_chunked_kv_core`` -> ``_chunked_prefix_attn_mha``; under the scripts'
# ``--attention-backend trtllm_mla --disable-radix-cache`` only a prompt split across
# chunks has a prefix), FlashInfer's trtllm-gen ragged kernel non-causal with its LSE, a
# kernel SGLang's own start-up request (one short prompt) never runs. Each run started a
# fresh ``docker run --rm`` container (``runners/launch_b200-nvd.sh``) whose FlashInfer
# cache mount 15b7c00b0 (2025-10-06) had dropped, so that kernel's cubin (FlashInfer 0.5.0
# ``jit/cubin_loader.py`` ``get_cubin``: read from the cubin directory, else downloaded; the
# fp4 script ``sed``s that file's download lock away, flashinfer PR #1779) is loaded on first
# use. No source gives the seconds: fitted on the fit rows of the sample
# (docs/decisions.md, "Issue 31, step: the cold start of InferenceMAX's servers before
# their client's warm-up", helper ``cold-start`` session 27; refitted to 69 s on SGLang's
# ignore-EOS adder, helper ``sgl-eos``), over the B200 DeepSeek
# SGLang rows measured cold (2025-11-02 to -18, images v0.5.3rc1 and v0.5.5, both scripts'
# chunks). Per GPU: the CSV's cold SGLang rows are all B200 (GB200's are disaggregated). The
# cold TensorRT-LLM and vLLM rows of the same weeks show no such stall (their median
# implied one-time cost, as the twin prices them, is under 0.5 s, as their warm rows').
INFERENCEMAX_SGLANG_COLD_PREFIX_STALL_S = {"b200_sxm": 69.0}


def inferencemax_cold_prefix_stall_s(row: SiliconRow) -> float:
    """The cold-start stall of ``row``'s server (above), seconds: its fitted value where
    the row's data says its client sent no warm-up (``harness.cold_server``) to an SGLang
    DeepSeek server on a GPU with a fitted one; 0 (a warm server) otherwise."""
    if row.backend != "sglang" or not cold_server(row) or not inferencemax_deepseek(row):
        return 0.0
    return INFERENCEMAX_SGLANG_COLD_PREFIX_STALL_S.get(row.system, 0.0)


def inferencemax_sglang(row: SiliconRow) -> dict[str, str]:
    """The ``--set`` flags of InferenceMAX's SGLang server for ``row`` (above); empty
    where no one configuration of that image covers it."""
    scripted = inferencemax_qwen35(row) or inferencemax_glm5(row)
    if scripted:
        return scripted
    if not inferencemax_deepseek(row):
        return {}
    b300 = row.system == "b300_sxm" and row.backend_version == INFERENCEMAX_SGLANG_B300
    v0506 = row.backend_version == INFERENCEMAX_SGLANG_B200_0506 and inferencemax_row(row)
    # the v0.5.5 and v0.5.6 images ran the same scripts (above)
    unnamed = row.system == "b200_sxm" and (inferencemax_sglang_unnamed(row) or v0506)
    if row.backend_version != INFERENCEMAX_SGLANG_VERSION and not (b300 or unnamed):
        return {}
    if row.system == "b300_sxm" and not b300:  # no B300 configuration of 0.5.9
        return {}
    conc, tp, lengths = row.concurrency or 0, row.tp or 1, (row.isl, row.osl)
    poll = "30" if conc >= 16 else "10"
    long_prompt = lengths == (8192, 1024)
    flags: tuple[str, ...]
    extra: dict[str, str] = {}
    blackwell = row.system in ("b200_sxm", "b300_sxm")
    if blackwell and row.precision == "fp4":
        # before the search space the job ran 4-128 clients over every length (above); a
        # 0.5.6 row with no day is not early (its image came 2025-12-31)
        day = measured_on(row)
        early = unnamed and day is not None and day < INFERENCEMAX_FP4_SEARCH_SPACE_DAY
        top = 16 if tp == 8 and long_prompt and not early else 128
        if tp not in (4, 8) or conc > top:
            return {}
        flags = ("256", "0.85", "16384", "16384", poll)
    elif unnamed and row.precision == "fp8":  # the v0.5.5 era: tp 8 only, no -mtp
        if tp != 8 or conc > 64:
            return {}
        flags = ("128", "0.82", "32768", "32768", poll)
    elif blackwell and row.precision == "fp8" and tp == 4:
        if not long_prompt or conc > 32:
            return {}
        flags = ("32", "0.95", "8192", "8192", "10")
    elif blackwell and row.precision == "fp8" and tp == 8:
        if conc <= (4 if long_prompt else 64) and not _dsr1_fp8_mtp_run(row):
            flags = ("128", "0.82", "32768", "32768", poll)
        elif conc <= 512 and not b300:
            flags, extra = ("512", "0.82", "16384", "16384", poll), _SGLANG_MTP
        else:
            return {}
    elif row.system == "h200_sxm" and row.precision == "fp8" and tp == 8 and conc <= 64:
        running = "512" if lengths == (1024, 1024) else "256"
        flags = (running, "0.82", "32768", "32768", "1")
    else:
        return {}
    # Every DeepSeek script passes --disable-radix-cache: B200 (dsr1_fp{4,8}_b200_docker.sh
    # of November, d22bf9ca9; single_node/dsr1_fp{4,8}_b200.sh and dsr1_fp8_b200_mtp.sh at
    # 12ba0ae), H200 (dsr1_fp8_h200_slurm.sh from 425f74d51, 2025-09-12, to
    # single_node/dsr1_fp8_h200.sh at 12ba0ae) and B300 (dsr1_fp{4,8}_b300.sh and
    # dsr1_fp8_b300_mtp.sh at e8924a6). With the client's --ignore-eos SGLang then forms
    # prefill batches with add_one_req_ignore_eos (twin.engine.sglang_batching).
    extra = {"disable_radix_cache": "true", **extra}
    return {**dict(zip(_SGLANG_FLAGS, flags, strict=True)), **extra}
