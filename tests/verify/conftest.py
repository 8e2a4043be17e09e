"""Fixtures for the verify tests: stand-in servers that stop when the test ends."""

import socket

import pytest
from standin_server import StandinServer


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
