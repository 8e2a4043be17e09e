"""`kimi-serve healthcheck`: GET /health of this container's server (on KIMI_HOST, loopback for a
wildcard bind); exit 0 healthy, 1 not (Docker's HEALTHCHECK contract: never 2, whatever goes
wrong). One line of output either way; the whole request is bounded by --timeout."""

from __future__ import annotations

import sys
from typing import Optional

import click

from entrypoint.cli._context import echo, check_timeout
from entrypoint.core.base.errors import KimiError

EXIT_HEALTHY, EXIT_UNHEALTHY = 0, 1


def probe(url: str, timeout: float) -> tuple:
    """(healthy, what happened): one GET within `timeout` seconds in total, body capped."""
    from entrypoint.core.base.bounded import ConnectionRefused, HttpError, request

    try:
        resp = request("GET", url, timeout=timeout, max_bytes=64 * 1024)
    except ConnectionRefused:  # vLLM opens its port once the model is loaded
        return False, "not ready: connection refused (the server is not running or still loading the model)"
    except HttpError as exc:
        return False, f"no answer ({exc})"
    return 200 <= resp.status_code < 300, f"HTTP {resp.status_code}"


def listening(port: int, timeout: float) -> tuple:
    """(healthy, what happened): whether a TCP connection to 127.0.0.1:`port` opens within `timeout`."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True, "listening"
    except OSError as exc:
        return False, f"not listening ({exc.strerror or exc})"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--timeout", type=float, default=5.0, show_default=True, callback=check_timeout,
              help="Seconds the whole request may take.")
@click.option("--ready", is_flag=True, help="Readiness, not liveness: unready too once the container's stop has "
              "begun (`kimi-serve drain`, its preStop hook), while vLLM drains with /health still 200.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="The server's port, as a rendering writes it into its probe: asked without composing the "
              "launch (without it, the launch says which server and port).")
def command(timeout: float, ready: bool, port: Optional[int]) -> None:
    """Query /health of the server this container runs (the router's port for the router role)."""
    import os

    from entrypoint.app.healthcheck import health_target, port_target, stop_begun

    if ready and stop_begun(os.environ):
        echo("unready: this container is stopping (kimi-serve drain): no new requests, the held ones drain")
        sys.exit(EXIT_UNHEALTHY)

    try:
        target = port_target(port) if port else health_target()
    except KimiError as err:
        echo(f"unhealthy: cannot tell which server to ask: {err.message}")
        sys.exit(EXIT_UNHEALTHY)
    if target.url:  # an HTTP server, or the weight cache's launcher (KIMI_PRELOAD): 200 once loaded
        healthy, what = probe(target.url, timeout)
        echo(f"{'healthy' if healthy else 'unhealthy'}: {target.role} {target.url}: {what}")
        sys.exit(EXIT_HEALTHY if healthy else EXIT_UNHEALTHY)
    if target.port:  # a KV helper (mooncake_master, store, LMCache): its TCP port
        healthy, what = listening(target.port, timeout)
        click.echo(f"{'healthy' if healthy else 'unhealthy'}: {target.role} 127.0.0.1:{target.port}: {what}")
        sys.exit(EXIT_HEALTHY if healthy else EXIT_UNHEALTHY)
    echo(f"healthy: the {target.role} (rank {target.rank}) serves no HTTP; nothing to ask")
    sys.exit(EXIT_HEALTHY)
