"""One helper the benchmark scripts share: run a worker on N threads at once and time them."""

from __future__ import annotations

import threading
import time
from typing import Callable


def timed_threads(worker: Callable[[], None], count: int) -> float:
    """Start `count` threads running `worker`, wait for all of them; the wall seconds it took."""
    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start
