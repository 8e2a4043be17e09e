"""The start-up budget, kept by the container itself (issue 50): a load that outruns its launch's
budget (core/compose/loading.py: recipes/serving.yaml's start period, or what the checkpoint's
size, each node's share and the loader ask) is stopped with one line that says so, wherever the
container runs. A rendering's probe is then only a bound past a hang of the entrypoint itself (the
recipe's longest budget: Kubernetes' startupProbe), the same for every launch of the recipe.

Before the entrypoint execs the server, it forks a watcher that outlives the exec beside it (the
server keeps the entrypoint's PID), as node/peers.py's does. The watcher asks the server's health
URL every few seconds; its first healthy answer ends the watch. When the budget passes first, it
writes the line to the termination log (Kubernetes shows it in `kubectl get pods` / `describe`) and
on stderr, then SIGTERM to the server, SIGKILL after the grace. It never signals anything but its
parent, and exits with it.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request
from typing import Optional

from entrypoint.node.watcher import fork_beside, stop_parent

ASK_EVERY_S = 5.0  # between two health requests while the server loads
ASK_TIMEOUT_S = 5.0


def healthy(url: str) -> bool:
    """One GET of the health URL answered 200."""
    try:
        with urllib.request.urlopen(url, timeout=ASK_TIMEOUT_S) as answer:  # noqa: S310 - a loopback http URL
            return answer.status == 200
    except (OSError, ValueError, urllib.error.URLError):
        return False


def _tell(message: str, termination_log: str) -> None:
    print(f"kimi-serve: error: {message}", file=sys.stderr, flush=True)
    if not termination_log:
        return
    try:  # the runtime's file only (Kubernetes makes a regular one); never an error of its own
        if not os.path.isfile(termination_log) or os.path.islink(termination_log):
            return
        with open(termination_log, "w", encoding="utf-8") as out:
            out.write(message[:4096] + "\n")
    except OSError:
        pass


def watch(parent: int, url: str, budget_s: float, grace_s: float, message: str, termination_log: str,
          every_s: float = ASK_EVERY_S) -> bool:
    """Ask `url` until it is healthy (True) or `budget_s` has passed: then tell `message`, SIGTERM
    `parent`, SIGKILL after `grace_s` (False). Ends quietly when the parent is gone."""
    deadline = time.monotonic() + budget_s
    while os.getppid() == parent:
        if healthy(url):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(every_s, left))
    if os.getppid() != parent:
        return False
    _tell(message, termination_log)
    stop_parent(parent, grace_s)
    return False


def start(url: str, budget_s: float, grace_s: float, message: str, termination_log: str) -> Optional[int]:
    """Fork the watcher of the server about to be exec'd in this process; its PID (None in the
    watcher, which never returns). It dies with the server (PR_SET_PDEATHSIG)."""
    return fork_beside(lambda parent: watch(parent, url, budget_s, grace_s, message, termination_log),
                       lambda err: print(f"kimi-serve: warning: start-up watch stopped ({type(err).__name__}: {err})",
                                         file=sys.stderr, flush=True))
