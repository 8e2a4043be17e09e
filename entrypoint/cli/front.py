"""`kimi-serve front`: the stream front (entrypoint/front, docs/fleet.md "Streams through faults"), as
the plan's router process runs it: the front on the deployment's public port, the router it fronts
started as its child (the program after `--`) on a port of its own."""

from __future__ import annotations

import sys

import click

from entrypoint.cli._context import guarded


@click.command(context_settings={"help_option_names": ["-h", "--help"], "ignore_unknown_options": True})
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(1, 65535), required=True, help="Port to bind (the deployment's).")
@click.option("--upstream", required=True, help="The router's URL (http://127.0.0.1:PORT).")
@click.option("--migrations", type=click.IntRange(0, 100), default=3, show_default=True,
              help="Engines a stream may be continued on after its own stops (0: never; an explicit error).")
@click.option("--drain-s", type=click.IntRange(0, 86400), default=30, show_default=True,
              help="Seconds streams in flight may take to finish after SIGTERM.")
@click.argument("child", nargs=-1, type=click.UNPROCESSED)
@guarded
def command(host: str, port: int, upstream: str, migrations: int, drain_s: int, child: tuple) -> None:
    """Serve the stream front; CHILD (after --) is the router it starts and fronts."""
    from entrypoint.front.server import serve  # aiohttp only for this command

    sys.exit(serve(host, port, upstream, migrations, drain_s, list(child)))
