"""A watcher forked beside a process about to be exec'd in the entrypoint's PID (node/peers.py,
node/startup.py): it outlives the exec, dies with the process (PR_SET_PDEATHSIG), never returns
into the entrypoint, and signals nothing but its parent."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Callable, Optional


def fork_beside(run: Callable[[int], object], on_error: Callable[[Exception], None]) -> Optional[int]:
    """Fork a watcher that runs `run(parent)`; its PID (the watcher itself never returns: it exits
    when `run` ends, and `on_error` is told a failure, which never takes the parent down)."""
    parent = os.getpid()
    child = os.fork()
    if child:
        return child
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        run(parent)
    except Exception as err:  # noqa: BLE001 - a watcher's failure never takes the parent down
        on_error(err)
    finally:
        os._exit(0)


def stop_parent(parent: int, grace_s: float) -> None:
    """SIGTERM to `parent`, SIGKILL once `grace_s` has passed and it still runs."""
    try:
        os.kill(parent, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        if os.getppid() != parent:  # it is gone
            return
        time.sleep(0.5)
    try:
        os.kill(parent, signal.SIGKILL)
    except ProcessLookupError:
        pass
