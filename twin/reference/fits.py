"""Does the reference executor's model fit on the device? Checked before any work.

The executor holds every parameter (all experts of a MoE included) as a real tensor in
the dtype ``twin calibrate`` times on the device. A model whose weights exceed the
memory free there would be killed by the kernel's out-of-memory handler (no message)
or fail deep in PyTorch after minutes of calibration, so ``twin validate`` and the
executor refuse it up front with one line. This module needs no torch.
"""

from __future__ import annotations

import os
from typing import Any

from twin.errors import TwinError
from twin.hardware import GB
from twin.model import ModelSpec

# What the executor runs in on each device: what `twin calibrate` times there
# (fp32 on the CPU, bf16 on a GPU).
EXECUTOR_DTYPE = {"cpu": "float32", "cuda": "bfloat16"}
DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}
# Share of the free memory the weights may take; the rest is for activations, the
# cached states and the Python process (an assumed margin, not a measured one).
WEIGHT_SHARE = 0.9


def free_memory(device: str, torch: Any = None) -> int:
    """Bytes free on ``device``: the GPU's free memory, or the host's MemAvailable."""
    if device == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def check_fits(model: ModelSpec, device: str, free: int, dtype: str | None = None) -> None:
    """A ``TwinError`` when ``model``'s weights in ``dtype`` (default: the device's) exceed
    :data:`WEIGHT_SHARE` of the ``free`` bytes."""
    dtype = dtype or EXECUTOR_DTYPE[device]
    need = model.n_params * DTYPE_BYTES[dtype]
    if need > WEIGHT_SHARE * free:
        where = "this machine's memory" if device == "cpu" else "the GPU"
        hint = " or a GPU (--device cuda)" if device == "cpu" else ""
        raise TwinError(
            f"model {model.name!r} is too large for the reference executor on {device}: "
            f"{model.n_params / 1e9:.2f} B parameters in {dtype} are {need / GB:.1f} GB, "
            f"{where} has {free / GB:.1f} GB free (at most {WEIGHT_SHARE:.0%} may go to "
            f"weights); validate a smaller model (e.g. tiny-hybrid, tiny-moe-hybrid){hint}"
        )
