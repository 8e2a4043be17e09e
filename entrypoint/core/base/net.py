"""Addresses: IPv6 literals in brackets in URLs, wildcard binds replaced by loopback, and name
lookups and connections within one deadline."""

from __future__ import annotations

import threading
import time
from typing import Optional

WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def url_host(host: str) -> str:
    """`fd00::1` -> `[fd00::1]` (RFC 3986); names and IPv4 addresses as they are."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def client_url(bind_host: Optional[str], port: int) -> str:
    """The URL a client on this machine uses for a server bound to `bind_host`:`port`."""
    host = (bind_host or "").strip()
    if host in WILDCARDS:
        host = "::1" if host in ("::", "[::]") else "127.0.0.1"
    return f"http://{url_host(host)}:{port}"


def resolve(host: str, port: int, timeout: float) -> list:
    """getaddrinfo within `timeout` seconds: the resolver itself has no deadline (a stalled DNS
    server holds it for tens of seconds), so it runs in a daemon thread that is left behind when
    it is late. OSError (socket.timeout when late) as getaddrinfo raises it."""
    import socket  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    found: list = []
    failed: list = []

    def ask() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            failed.append(exc)

    worker = threading.Thread(target=ask, name="kimi-serve-resolve", daemon=True)
    worker.start()
    worker.join(max(timeout, 0.001))
    if worker.is_alive():
        raise socket.timeout(f"resolving {host} took more than {timeout:g} s")
    if failed:
        raise failed[0]
    return found


def connect(host: str, port: int, timeout: float):
    """A TCP connection to host:port with one deadline for the name lookup and the connect."""
    import socket  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    deadline = time.monotonic() + timeout
    last: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in resolve(host, port, timeout):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last
