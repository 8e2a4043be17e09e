"""node/startup.py with real processes (issue 50: the start-up budget is the container's to keep):
a "server" (a sleeping Python that forked the watch as the entrypoint does before its exec) that
never answers healthy is stopped once its budget has passed, with its one line on stderr and in the
termination log; one that answers healthy keeps running. app/serve.keep_budget gives the watch the
launch's own budget and health URL."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from entrypoint.app import serve
from entrypoint.core.compose.launch import NodeFacts, compose_launch
from entrypoint.core.compose.loading import launch_budget_s, startup_bound_s
from entrypoint.core.compose.settings import read_settings
from tests.deploy.shapes import launch_for

ROOT = Path(__file__).resolve().parents[2]
SERVER = textwrap.dedent("""
    import sys, time
    from entrypoint.node import startup
    url, budget, log = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    startup.start(url, budget, 2, "the server did not answer healthy within 2 s, so it is stopped", log)
    print("server loading", flush=True)
    time.sleep(60)
""")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server(url: str, budget_s: float, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SERVER, url, str(budget_s), str(log)], cwd=ROOT,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_a_load_past_its_budget_is_stopped_with_one_line(tmp_path):
    log = tmp_path / "termination-log"
    log.write_text("")  # the runtime's file (Kubernetes makes it)
    server = _server(f"http://127.0.0.1:{_closed_port()}/health", 2, log)
    try:
        assert server.wait(30) == -signal.SIGTERM  # the watch's SIGTERM ends the loading "server"
        said = server.stderr.read().decode()
    finally:
        _stop(server)
    line = "kimi-serve: error: the server did not answer healthy within 2 s, so it is stopped"
    assert line in said.splitlines()
    assert log.read_text() == line.removeprefix("kimi-serve: error: ") + "\n"


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_server_healthy_within_its_budget_keeps_running(tmp_path):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    log = tmp_path / "termination-log"
    log.write_text("")
    server = _server(f"http://127.0.0.1:{httpd.server_address[1]}/health", 2, log)
    try:
        time.sleep(6)  # three times its budget
        assert server.poll() is None
        assert log.read_text() == ""
    finally:
        _stop(server)
        httpd.shutdown()


H200 = {"KIMI_HARDWARE": "h200", "KIMI_VLLM_VERSION": "0.33.0"}


def _launch(env):
    return compose_launch(read_settings({**H200, **env}), NodeFacts())


@pytest.mark.parametrize("env", [{}, {"KIMI_LOAD_FORMAT": "safetensors"}, {"KIMI_PORT": "9000"}])
def test_the_watch_keeps_the_launch_budget(monkeypatch, env):
    asked = []
    monkeypatch.setattr(serve.startup, "start", lambda *a: asked.append(a) or 1)
    launch = _launch(env)
    assert serve.keep_budget(launch, launch.this_process(), "/dev/termination-log") == 1
    ((url, budget, grace, message, log),) = asked
    assert url == f"http://127.0.0.1:{env.get('KIMI_PORT', '8000')}/health"
    assert budget == launch_budget_s(launch.plan, launch.catalog, launch.load)
    assert budget == 3600 if not env.get("KIMI_LOAD_FORMAT") else budget > 3600  # 595 GB, storage unknown
    assert budget <= startup_bound_s(launch.catalog)  # Kubernetes' probe never ends a start the container keeps
    assert f"within its start-up budget of {budget} s (KIMI_LOAD_FORMAT={env.get('KIMI_LOAD_FORMAT', 'recipe')}" in message
    assert (grace, log) == (launch.catalog.serving.stop.margin_s, "/dev/termination-log")


def test_no_watch_on_a_router_or_a_headless_rank(monkeypatch):
    monkeypatch.setattr(serve.startup, "start", lambda *a: pytest.fail("watched"))
    pd = launch_for("k8s", {**H200, "KIMI_STRATEGY": "pd_cluster"})  # the addresses its pods are given
    (router,) = [p for p in pd.plan.processes if p.role == "router"]
    assert serve.keep_budget(pd, router) is None
    group = launch_for("k8s", {**H200, "KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2"})
    headless = [p for p in group.plan.processes if p.is_engine and not p.serves_http]
    assert headless and all(serve.keep_budget(group, p) is None for p in headless)
