"""This node as a host backend (KIMI_HARDWARE=cpu) sees it: its RAM and the cores this process may
use. Kept apart from the GPU detection so `print` reads it without importing the probes."""

from __future__ import annotations

import os
from typing import Tuple


def host_facts() -> Tuple[float, int]:
    """(GB of RAM, usable cores)."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError):
        ram = 0.0
    return ram, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
