"""The nodes of one multi-node copy watch each other where no scheduler restarts the group
(recipes/serving.yaml `peer_watch`; measured: vLLM's surviving ranks hang on an idle peer's loss,
tests/live/test_multi_node_tp.py).

Before the entrypoint execs the engine, it forks a watcher that outlives the exec beside it (the
engine keeps the entrypoint's PID). Rank 0's watcher listens on the peer port; every other rank's
connects to rank 0 (retrying until rank 0 is up) and holds the connection, with TCP keepalive so a
node lost with its power is found too. Once a peer has been seen, losing it stops this node: SIGTERM
to the engine, SIGKILL after the grace. Every survivor exits, and Compose, Slurm or a host's service
manager restart the copy as a unit. A LeaderWorkerSet needs none of it (it recreates the group:
RecreateGroupOnPodRestart), so the watch is off there. The watcher never signals anything but its
parent, and exits with it.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
import time
from typing import Mapping, Optional, cast

from entrypoint.node.watcher import fork_beside, stop_parent

RETRY_S = 2.0  # between a worker's tries to reach rank 0


def wanted(proc, environ: Mapping[str, str]) -> bool:
    """A vLLM engine of a multi-node group (rank 0 or a headless rank), outside a LeaderWorkerSet."""
    if not proc.is_engine or proc.vllm is None or any(k.startswith("LWS_") for k in environ):
        return False
    return proc.role in ("head", "worker")


def _keepalive(sock: socket.socket, watch) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", watch.keepalive_idle_s), ("TCP_KEEPINTVL", watch.keepalive_interval_s),
                        ("TCP_KEEPCNT", watch.keepalive_probes)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def _say(message: str) -> None:
    print(f"kimi-serve: peer watch: {message}", file=sys.stderr, flush=True)


def _stop(parent: int, grace_s: int, why: str) -> None:
    _say(f"{why}: stopping this node (SIGTERM, SIGKILL after {grace_s} s) so the copy restarts as a unit")
    stop_parent(parent, grace_s)


def head(parent: int, bind: str, workers: int, watch) -> None:
    """Rank 0: accept the workers' connections; when one that was up closes, stop the node."""
    server = socket.create_server((bind, watch.port), reuse_port=False)
    server.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    peers: dict = {}
    while os.getppid() == parent:
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj is server:
                conn, addr = server.accept()
                _keepalive(conn, watch)
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ)
                peers[conn] = addr[0]
                _say(f"node at {addr[0]} joined ({len(peers)} of {workers})")
                continue
            conn = cast(socket.socket, key.fileobj)  # registered: the listener, or a peer's connection
            try:
                data = conn.recv(64)
            except OSError:
                data = b""
            if not data:
                _stop(parent, watch.grace_s, f"the node at {peers.get(conn, '?')} was lost")
                return


def worker(parent: int, head_addr: str, watch) -> None:
    """A headless rank: reach rank 0 (retrying while it starts), hold the connection; lost, stop."""
    conn: Optional[socket.socket] = None
    while os.getppid() == parent and conn is None:
        try:
            conn = socket.create_connection((head_addr, watch.port), timeout=5)
        except OSError:
            time.sleep(RETRY_S)
    if conn is None:
        return
    _keepalive(conn, watch)
    conn.settimeout(1.0)
    conn.sendall(b"rank\n")
    while os.getppid() == parent:
        try:
            data = conn.recv(64)
        except socket.timeout:
            continue
        except OSError:
            data = b""
        if not data:
            _stop(parent, watch.grace_s, f"rank 0 at {head_addr} was lost")
            return


def start(proc, settings, watch, environ: Mapping[str, str]) -> Optional[int]:
    """Fork the watcher for this node's engine (about to be exec'd in this process); its PID, or
    None where no watch applies. The watcher dies with the engine (PR_SET_PDEATHSIG)."""
    if not wanted(proc, environ):
        return None

    def run(parent: int) -> None:
        if proc.rank == 0:
            head(parent, settings.node_addr or "0.0.0.0", settings.nodes - 1, watch)
        else:
            worker(parent, settings.head_addr, watch)

    return fork_beside(run, lambda err: _say(f"stopped watching ({type(err).__name__}: {err})"))
