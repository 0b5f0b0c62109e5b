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
