"""Readiness is not liveness (issue 38): vLLM keeps /health at 200 while it drains, so a container's
readiness (`kimi-serve healthcheck --ready`) also fails once its stop has begun (`kimi-serve drain
--pause N`, the preStop hook), while liveness (`healthcheck`, /health) stays good through the drain.
Against a real HTTP server standing in for vLLM's /health (200 while it drains, as vLLM 0.33's)."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import pytest


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the stdlib's name
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()


def run(args, tmp_path, port, **env):
    full = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "TMPDIR": str(tmp_path),
            "KIMI_HARDWARE": "h200", "KIMI_PORT": str(port), **env}
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], env=full, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.slow
def test_a_stop_flips_readiness_first_and_liveness_stays(tmp_path, server):
    assert run(["healthcheck", "--ready"], tmp_path, server).returncode == 0
    started = time.monotonic()
    drain = run(["drain", "--pause", "1"], tmp_path, server)
    assert drain.returncode == 0 and time.monotonic() - started >= 1  # it waits the pause
    assert drain.stdout.startswith("stopping: out of readiness") and drain.stdout.count("\n") == 1
    ready = run(["healthcheck", "--ready"], tmp_path, server)
    assert ready.returncode == 1 and ready.stdout.startswith("unready: this container is stopping")
    alive = run(["healthcheck"], tmp_path, server)  # vLLM drains with /health 200: alive, not restarted
    assert alive.returncode == 0 and alive.stdout.startswith("healthy")


def test_a_process_that_backs_the_engines_waits_out_their_drain_and_stays_ready(tmp_path, server):
    """`--through-drain` (a headless worker, a KV helper): the pause, then KIMI_DRAIN_TIMEOUT, which the
    container reads itself (the rendered object holds no sum of them), and no readiness flip."""
    started = time.monotonic()
    drain = run(["drain", "--pause", "0", "--through-drain"], tmp_path, server, KIMI_DRAIN_TIMEOUT="2")
    assert drain.returncode == 0 and time.monotonic() - started >= 2, drain.stderr
    assert drain.stdout == "stopping: SIGTERM follows the 0 s pause and the engines' 2 s drain\n"
    assert run(["healthcheck", "--ready"], tmp_path, server).returncode == 0


def test_readiness_needs_the_server_too(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = run(["healthcheck", "--ready", "--timeout", "2"], tmp_path, port)
    assert done.returncode == 1 and "connection refused" in done.stdout


def test_drain_refuses_a_bad_pause(tmp_path, server):
    done = run(["drain", "--pause", "-1"], tmp_path, server)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert not (tmp_path / "kimi-serve-stopping").exists()


@pytest.mark.slow
def test_a_restarted_container_is_ready_again(tmp_path, server):
    """A liveness failure runs the preStop hook too, and the container restarts in the same pod, whose
    scratch /tmp (an emptyDir) keeps the stop mark: the entrypoint clears it before it execs vLLM, or
    the restarted engine would stay out of readiness for good."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "record"
    fake = bindir / "vllm"  # stands in for vLLM: records that it was exec'd, then exits
    fake.write_text(f"#!{sys.executable}\nimport pathlib\npathlib.Path({str(record)!r}).write_text('ran')\n")
    fake.chmod(0o755)
    assert run(["drain", "--pause", "0"], tmp_path, server).returncode == 0
    assert run(["healthcheck", "--ready"], tmp_path, server).returncode == 1
    started = run([], tmp_path, server, PATH=f"{bindir}:{os.environ['PATH']}", KIMI_PREFLIGHT="off",
                  KIMI_CACHE_DIR=str(tmp_path / "cache"))
    assert started.returncode == 0 and record.read_text() == "ran", started.stderr
    ready = run(["healthcheck", "--ready"], tmp_path, server)
    assert ready.returncode == 0, ready.stdout
