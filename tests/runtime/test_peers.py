"""node/peers.py with real processes and sockets: two "engines" (sleeping Pythons that started the
peer watch as the entrypoint does before its exec), rank 0 and a worker; one is SIGKILLed (a lost
node) and the other's watcher stops it within seconds. The live version with vLLM's two-node shape
is tests/live/test_multi_node_tp.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = textwrap.dedent("""
    import sys, time
    from types import SimpleNamespace as NS
    from entrypoint.node import peers
    role, port = sys.argv[1], int(sys.argv[2])
    proc = NS(is_engine=True, vllm=object(), role=role, rank=0 if role == "head" else 1)
    settings = NS(node_addr="127.0.0.1", nodes=2, head_addr="127.0.0.1")
    watch = NS(port=port, keepalive_idle_s=1, keepalive_interval_s=1, keepalive_probes=2, grace_s=2)
    peers.start(proc, settings, watch, {})
    print("engine up", flush=True)
    time.sleep(120)
""")


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _engine(role: str, port: int, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", ENGINE, role, str(port)], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def _joined(head: subprocess.Popen, within_s: float = 20) -> None:
    import select

    end = time.monotonic() + within_s
    seen = b""
    while time.monotonic() < end:
        if select.select([head.stderr], [], [], 0.2)[0]:
            seen += os.read(head.stderr.fileno(), 4096)
        if b"joined (1 of 1)" in seen:
            return
    pytest.fail(f"the worker never joined: {seen!r}")


@pytest.mark.slow
@pytest.mark.parametrize("lost", ["worker", "head"])
def test_a_lost_peer_stops_the_survivor(lost):
    port = _port()
    head = _engine("head", port)
    worker = _engine("worker", port)
    try:
        _joined(head)
        gone, survivor = (worker, head) if lost == "worker" else (head, worker)
        os.killpg(gone.pid, signal.SIGKILL)  # the node and everything on it
        t0 = time.monotonic()
        assert survivor.wait(15) == -signal.SIGTERM  # the watcher's SIGTERM ends the sleeping "engine"
        assert time.monotonic() - t0 < 10
        assert b"was lost: stopping this node" in survivor.stderr.read()
    finally:
        for p in (head, worker):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def test_no_watch_in_a_leaderworkerset_or_outside_a_multi_node_group():
    from types import SimpleNamespace as NS

    from entrypoint.node import peers

    head = NS(is_engine=True, vllm=object(), role="head", rank=0)
    assert peers.wanted(head, {}) and not peers.wanted(head, {"LWS_LEADER_ADDRESS": "x"})
    assert not peers.wanted(NS(is_engine=True, vllm=object(), role="single", rank=0), {})
    assert not peers.wanted(NS(is_engine=False, vllm=None, role="router", rank=0), {})
