"""Bounds on a deployment that keep a run's memory and time finite before it starts.

The bottom layer's one home for them: the CLI's checks, the engine's configuration and
``twin plan`` all refuse values past these (issue 32).
"""

# Each replica holds its own scheduler, cache and memory accounting (the ten-million-request
# benchmark runs 256); tensor parallelism beyond a 576-GPU NVLink domain (NVIDIA GB200
# NVL576) does not exist.
MAX_REPLICAS = 100_000
MAX_TP = 576

# The largest cache a replica can be given, GB: 100 TB, far above any machine's memory and
# host tier (a GB200 NVL72 rack has 13.5 TB of HBM, NVIDIA's datasheet), so a typo such as
# 1e308 is refused before a byte count overflows.
MAX_CACHE_GB = 1e5

# Counts a command runs, checked before any work (issue 32: --seeds 1e9, --batches 1e9 and a
# billion sessions hung or died of MemoryError):
# - points in one capacity report: a 100,000-point sweep is already hours on a Ray cluster;
MAX_POINTS = 100_000
# - sessions one workload generates: ten million (the largest benchmark, ten million
#   requests, takes minutes and a few GB; a billion would fill a disk over hours);
MAX_SESSIONS = 10_000_000
# - sequences in one priced decode batch (twin cost --batches): a million is ~1 s and 60 MB
#   (1e8 took 5 s and 830 MB, 1e9 died); engines run a few thousand per step;
MAX_BATCH = 1_000_000
# - entries of a comma-separated list flag (--lengths, --batches): a table, not a sweep;
MAX_LIST_ITEMS = 1_000
# - timings of each prefill in one validation (twin validate --repeats): the median of a
#   few is what it reports (default 3); 100 already makes a 100-request CPU validation
#   take hours, and a billion never ends;
MAX_REPEATS = 100
# - session arrivals per second (--session-rate): a million a second reaches MAX_SESSIONS in
#   ten simulated seconds (no run of the twin could go on past that), while a typo such as
#   1e30 a second put every session at t = 0 and, over a --duration, asked for ~1e31
#   sessions (the count hung);
MAX_SESSION_RATE = 1e6
# - simulated seconds (--duration, --until-s, --warmup-s): a billion seconds is 32 years,
#   and float64 event times near it still resolve 0.1 us (2^-23 s), finer than any step;
#   at 1e30 s they resolve 1e14 s, and every event of a run lands on one instant.
MAX_SECONDS = 1e9
# - worker processes: more than the hardware threads of any one machine (a two-socket
#   192-core server with SMT has 768).
MAX_JOBS = 1_024

# Model configs (config.json, issue 32: a config with 10^7 layers hung building its layer
# list; widths near 2^63 overflow byte counts):
# - layers: the deepest published LLM has 126 (Llama 3.1 405B's config.json); 1,024 is eight
#   times that, and a per-layer pattern stays a short list;
MAX_LAYERS = 1_024
# - any other integer of a config (a width, a head count, a vocabulary, a window): 2^24,
#   64 times the largest vocabulary (Gemma 3's 262,144) and above any context length
#   (Llama 4 Scout's 10M tokens), so weights and KV bytes stay far inside int64.
MAX_CONFIG_INT = 1 << 24

# The deepest JSON nesting read from a user (profiles, model configs, --set values, workload
# metadata): real files nest a handful of levels (a profile's kernels.gemm.provenance is 4),
# while Python's json decoder recurses once per level and dies with RecursionError near 1,000.
MAX_JSON_DEPTH = 64


def check_json_depth(text: str | bytes, where: str) -> None:
    """Refuse JSON nested deeper than ``MAX_JSON_DEPTH`` before it is decoded (brackets inside
    strings do not count); a ``TwinError`` naming ``where``."""
    import re

    from twin.errors import TwinError

    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    depth = 0
    for m in re.finditer(r'"(?:\\.|[^"\\])*"|[\[{]|[\]}]', text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise TwinError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
        elif tok in "]}":
            depth -= 1


# Longest sequence (a session's full prompt + output) accepted: 16M tokens is
# beyond every context window published today, so longer means a broken file.
MAX_SEQUENCE_TOKENS = 2**24

# The longest prompt + output of any turn a generated workload allows unless told
# (``twin workload generate --max-context``, ``WorkloadGenerator.write``).
DEFAULT_MAX_CONTEXT = 32768
