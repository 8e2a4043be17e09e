"""`kimi-serve drain --pause N`: a container's preStop hook (docs/day2.md). It marks the container as
stopping, so its readiness probe (`kimi-serve healthcheck --ready`) fails from now on and the
endpoints, the fleet router and gateways stop sending it new requests, then waits N seconds for
that to reach them; the kubelet's SIGTERM that follows starts vLLM's drain of what it still holds.
`--through-drain` (a process that serves no client but backs the engines: a headless worker, a KV
helper, LMCache's server): it stays ready and waits the pause and then the engines' drain, the
KIMI_DRAIN_TIMEOUT it reads itself, so that it gets SIGTERM only once they have drained."""

from __future__ import annotations

import os
import time

import click

from entrypoint.cli._context import echo, guarded


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pause", type=click.IntRange(0, 3600), required=True,
              help="Seconds to wait once out of readiness, before the runtime's SIGTERM.")
@click.option("--through-drain", is_flag=True,
              help="Stay ready, and wait the engines' drain (KIMI_DRAIN_TIMEOUT) after the pause.")
@guarded
def command(pause: int, through_drain: bool) -> None:
    """Take this container out of readiness, then wait PAUSE seconds (a preStop hook)."""
    from entrypoint.app.healthcheck import begin_stop, engines_drain_s

    if through_drain:
        drain = engines_drain_s(os.environ)
        echo(f"stopping: SIGTERM follows the {pause} s pause and the engines' {drain} s drain")
        time.sleep(pause + drain)
        return
    path = begin_stop(os.environ)
    echo(f"stopping: out of readiness ({path}); SIGTERM and the drain follow in {pause} s")
    time.sleep(pause)
