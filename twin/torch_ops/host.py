"""The host CPU's name, as profiles and the reference executor record it."""

from __future__ import annotations

import os
import platform


def cpu_name() -> str:
    """The processor's model name and the threads torch will use."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name} ({os.cpu_count()} threads)"
