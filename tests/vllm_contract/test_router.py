"""The PD router of every prefill/decode plan is the real vllm-router (PyPI 0.1.17, the
`vllm-contract` extra): its argv parses with the router's own parser (`parse_router_args`), and
the real router process, started with a plan's argv, routes prefill -> decode against stand-in
servers in vLLM's shapes.

What the router does with `--intra-node-data-parallel-size > 1` and no `--api-key` (its help
says the key is "required"), measured with 0.1.17: it starts, asks each worker's /metrics for
its engine count (404 -> it assumes the configured size), and sends every request with an
`X-data-parallel-rank` header and an empty `Authorization: Bearer ` header. vLLM checks keys only
when it was given one (--api-key / VLLM_API_KEY), which no plan does, so the plans pass no key.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError

from tests.conftest import IN_CI
from tests.vllm_contract.sweep import configurations

try:
    from vllm_router.launch_router import parse_router_args
except ImportError:  # pragma: no cover - the extra is not installed
    parse_router_args = None

needs_router = pytest.mark.skipif(parse_router_args is None and not IN_CI,
                                  reason="vllm-router is not installed (pip install -e '.[vllm-contract]')")
ROUTER_EXE = Path(sys.executable).with_name("vllm-router")


# Recipes that pin the router's --intra-node-data-parallel-size (Kimi-K3.yaml:
# strategy_overrides.pd_cluster.router.intra_node_data_parallel_size: 1).
PINNED = {"kimi-k3": 1}


def _pd_plans():
    """Every PD plan of the sweep; a pool shape the recipe's own data rules out (Kimi-K3's GPU
    floors and prefill tp) is refused, never rendered."""
    for cid, settings in configurations():
        if settings.get("KIMI_STRATEGY") == "pd_cluster":
            try:
                yield cid, build(settings).plan
            except KimiError as err:
                assert err.code == "unsupported_combination" and "pool" in err.message, f"{cid}: {err.message}"


@pytest.mark.slow
@needs_router
def test_every_pd_router_argv_parses_with_the_real_router():
    seen = 0
    for cid, plan in _pd_plans():
        router = plan.find("router", 0)
        args = parse_router_args(list(router.router_argv[1:]))
        assert args.vllm_pd_disaggregation and args.policy == "round_robin", cid
        prefill = [p for p in plan.processes if p.role == "prefill"]
        decode = [p for p in plan.processes if p.role == "decode"]
        assert [url for url, _ in args.prefill_urls] == [
            f"http://{a}:{prefill[0].port}" for a in _addrs(plan, "prefill", prefill)], cid
        assert list(args.decode_urls) == [f"http://{a}:{decode[0].port}" for a in _addrs(plan, "decode", decode)], cid
        want = PINNED.get(cid.split(":")[0]) or max(1, *(_local_dp(p) for p in prefill + decode))
        assert args.intra_node_data_parallel_size == want, cid
        assert args.api_key is None
        seen += 1
    assert seen >= 27


def _addrs(plan, role, procs):
    """The pool's node addresses the router should name: one per DEP node, else the head."""
    dep = any("--data-parallel-size" in p.argv for p in procs)
    count = len(procs) if dep else 1
    return [f"{role}-{i}.kimi.internal" for i in range(count)]


def _local_dp(proc):
    argv = list(proc.argv)
    return int(argv[argv.index("--data-parallel-size-local") + 1]) if "--data-parallel-size-local" in argv else 0


class _Worker(BaseHTTPRequestHandler):
    def log_message(self, *_args):
        pass

    def do_GET(self):  # noqa: N802
        self.server.seen.append(("GET", self.path, dict(self.headers), None))
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.server.seen.append(("POST", self.path, dict(self.headers), body))
        out = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": body.get("model"),
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": "ok"}}],
                          "kv_transfer_params": {"remote_engine_id": "e"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_metrics_port(argv) -> list:
    """A router's argv with a free Prometheus port: vllm-router binds its exporter on 29000 whatever the
    argv says (its default; a fleet's plan sets it on every address), and the live lane's fleets hold
    that port while the rest of the suite runs beside them (tests/conftest.py LIVE_LANE)."""
    argv, port = list(argv), str(_free_port())
    if "--prometheus-port" in argv:
        argv[argv.index("--prometheus-port") + 1] = port
    else:
        argv += ["--prometheus-port", port]
    return argv


@pytest.mark.slow
@needs_router
@pytest.mark.serial  # its pools bind the plan's 8001/8002 on 127.0.0.1, as the Compose test's services do: the docker lane (tests/conftest.py DOCKER_LANE)
def test_the_real_router_runs_a_plans_argv_without_an_api_key():
    """The router process of a DEP/DEP plan (intra-node DP 8), on loopback: prefill on 127.0.0.1,
    decode on 127.0.0.2, each on its pool's port of the plan (the strategy's: a --port of the
    user's is refused, issue 37)."""
    router_port = _free_port()
    env = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": "127.0.0.1",
           "KIMI_DECODE_ADDRS": "127.0.0.2", "KIMI_ROUTER_HOST": "127.0.0.1", "KIMI_ROUTER_PORT": str(router_port)}
    with pytest.raises(KimiError) as err:
        build({**env, "KIMI_EXTRA_ARGS": f"--port {_free_port()}"})
    assert "KIMI_PORT" in err.value.message
    plan = build(env).plan
    workers = {}
    for role, host in (("prefill", "127.0.0.1"), ("decode", "127.0.0.2")):
        srv = ThreadingHTTPServer((host, plan.find(role, 0).port), _Worker)
        srv.seen = []
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        workers[role] = srv
    router = plan.find("router", 0)
    assert "--api-key" not in router.argv and router.argv[router.argv.index("--intra-node-data-parallel-size") + 1] == "8"
    proc = subprocess.Popen([str(ROUTER_EXE), *free_metrics_port(router.argv[1:])], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "NO_COLOR": "1"})
    try:
        url = f"http://127.0.0.1:{router_port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.2)
        body = json.dumps({"model": plan.served_model_name, "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 8}).encode()
        ranks = set()
        for _ in range(3):
            req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.status == 200 and json.loads(resp.read())["choices"][0]["message"]["content"] == "ok"
        for role, srv in workers.items():
            posts = [(h, b) for m, p, h, b in srv.seen if m == "POST" and p == "/v1/chat/completions"]
            assert len(posts) == 3, role
            ranks |= {h.get("X-data-parallel-rank") or h.get("x-data-parallel-rank") for h, _ in posts}
        prefill_bodies = [b for m, p, h, b in workers["prefill"].seen if m == "POST"]
        assert all(b["kv_transfer_params"]["do_remote_decode"] for b in prefill_bodies)
        assert ranks <= {str(i) for i in range(8)} and None not in ranks
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        for srv in workers.values():
            srv.shutdown()
            srv.server_close()
