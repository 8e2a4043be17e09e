"""`kimi-serve drain --pause N`: a container's preStop hook (docs/day2.md). It marks the container as
stopping, so its readiness probe (`kimi-serve healthcheck --ready`) fails from now on and the
endpoints, the fleet router and gateways stop sending it new requests, then waits N seconds for
that to reach them; the kubelet's SIGTERM that follows starts vLLM's drain of what it still holds."""

from __future__ import annotations

import os
import time

import click

from entrypoint.cli._context import echo, guarded


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pause", type=click.IntRange(0, 3600), required=True,
              help="Seconds to wait once out of readiness, before the runtime's SIGTERM.")
@guarded
def command(pause: int) -> None:
    """Take this container out of readiness, then wait PAUSE seconds (a preStop hook)."""
    from entrypoint.app.healthcheck import begin_stop

    path = begin_stop(os.environ)
    echo(f"stopping: out of readiness ({path}); SIGTERM and the drain follow in {pause} s")
    time.sleep(pause)
