"""`kimi-serve healthcheck`: GET /health of this container's server on 127.0.0.1; exit 0 healthy,
1 not (Docker's HEALTHCHECK contract: never 2). One line of output either way."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

import click

from entrypoint.core.errors import KimiError

EXIT_HEALTHY, EXIT_UNHEALTHY = 0, 1
DEFAULT_PORT = 8000  # vLLM's default when the plan emits no --port


def health_url(proc, path: str, port=None) -> str:
    return f"http://127.0.0.1:{port or proc.port or DEFAULT_PORT}{path}"


def probe(url: str, timeout: float) -> tuple:
    """(healthy, what happened)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return 200 <= resp.status < 300, f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ConnectionRefusedError):  # vLLM opens its port once the model is loaded
            return False, "not ready: connection refused (the server is not running or still loading the model)"
        return False, f"no answer ({reason})"


@click.command()
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Seconds to wait for the answer.")
def command(timeout: float) -> None:
    """Query /health of the server this container runs (the router's port for the router role)."""
    from entrypoint.app import load_launch

    try:
        launch = load_launch(())
        proc = launch.this_process()
    except KimiError as err:
        click.echo(f"unhealthy: cannot tell which server to ask: {err.message}")
        sys.exit(EXIT_UNHEALTHY)
    if not proc.serves_http:
        click.echo(f"healthy: the {proc.role} (rank {proc.rank}) serves no HTTP; nothing to ask")
        sys.exit(EXIT_HEALTHY)
    from entrypoint.app import recorded_port

    # The start may have had arguments this command does not see (SageMaker's `serve`): the port it
    # recorded wins over the one the environment alone gives.
    url = health_url(proc, launch.catalog.serving.health.path, recorded_port())
    healthy, what = probe(url, timeout)
    click.echo(f"{'healthy' if healthy else 'unhealthy'}: {proc.role} {url}: {what}")
    sys.exit(EXIT_HEALTHY if healthy else EXIT_UNHEALTHY)
