"""`kimi-serve healthcheck`: GET /health of this container's server (on KIMI_HOST, loopback for a
wildcard bind); exit 0 healthy, 1 not (Docker's HEALTHCHECK contract: never 2, whatever goes
wrong). One line of output either way; the whole request is bounded by --timeout."""

from __future__ import annotations

import sys

import click

from entrypoint.cli._context import echo, check_timeout
from entrypoint.core.errors import KimiError

EXIT_HEALTHY, EXIT_UNHEALTHY = 0, 1


def probe(url: str, timeout: float) -> tuple:
    """(healthy, what happened): one GET within `timeout` seconds in total, body capped."""
    from entrypoint.core.bounded import ConnectionRefused, HttpError, request

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
def command(timeout: float) -> None:
    """Query /health of the server this container runs (the router's port for the router role)."""
    from entrypoint.app import load_launch, local_url

    try:
        launch = load_launch(())
        proc = launch.this_process()
    except KimiError as err:
        echo(f"unhealthy: cannot tell which server to ask: {err.message}")
        sys.exit(EXIT_UNHEALTHY)
    from entrypoint.core.plan import Port

    if Port.HEALTH in proc.ports:  # the weight cache's launcher (KIMI_PRELOAD): its /health, 200 once loaded
        from entrypoint.core.net import client_url

        url = client_url(None, proc.ports[Port.HEALTH]) + launch.catalog.serving.health.path
        healthy, what = probe(url, timeout)
        echo(f"{'healthy' if healthy else 'unhealthy'}: {proc.role} {url}: {what}")
        sys.exit(EXIT_HEALTHY if healthy else EXIT_UNHEALTHY)
    if not proc.serves_http and proc.port:  # a KV helper (mooncake_master, store, LMCache): its TCP port
        healthy, what = listening(proc.port, timeout)
        click.echo(f"{'healthy' if healthy else 'unhealthy'}: {proc.role} 127.0.0.1:{proc.port}: {what}")
        sys.exit(EXIT_HEALTHY if healthy else EXIT_UNHEALTHY)
    if not proc.serves_http:
        echo(f"healthy: the {proc.role} (rank {proc.rank}) serves no HTTP; nothing to ask")
        sys.exit(EXIT_HEALTHY)
    from entrypoint.app import recorded_port

    # The start may have had arguments this command does not see (SageMaker's `serve`): the port it
    # recorded wins over the one the environment alone gives, unless this command is told the port.
    from entrypoint.core.plan import Kind

    told = launch.settings.is_set("router_port" if proc.kind is Kind.ROUTER else "port")
    url = local_url(launch, proc, None if told else recorded_port()) + launch.catalog.serving.health.path
    healthy, what = probe(url, timeout)
    echo(f"{'healthy' if healthy else 'unhealthy'}: {proc.role} {url}: {what}")
    sys.exit(EXIT_HEALTHY if healthy else EXIT_UNHEALTHY)
