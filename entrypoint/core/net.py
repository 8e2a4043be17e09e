"""Addresses in URLs: IPv6 literals in brackets, wildcard binds replaced by loopback."""

from __future__ import annotations

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
