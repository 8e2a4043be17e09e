"""`kimi-serve print`: this container's launch, as a shell command or JSON {"argv", "env"}."""

from __future__ import annotations

import json
import os

import click

from entrypoint.cli._context import echo, guarded, say


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                 "help_option_names": ["-h", "--help"]})
@click.option("--format", "fmt", type=click.Choice(["shell", "json"]), default="shell", show_default=True)
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
@guarded
def command(fmt: str, vllm_args: tuple) -> None:
    """Print the launch this container would exec (VLLM_ARGS are added as container args would be)."""
    from entrypoint.app.launch import applied, load_launch
    from entrypoint.core.vllm.mask import mask_argv, mask_env
    from entrypoint.render.shell import render_process

    launch = load_launch(tuple(vllm_args), os.environ)
    proc = applied(launch, os.environ)
    for note in launch.notes:  # the interface this machine's routing chose (KIMI_IFACE unset); a refusal says only itself
        say(note, level="note")
    if fmt == "json":
        echo(json.dumps({"argv": mask_argv(proc.argv), "env": mask_env(proc.env)}, indent=2))
    else:
        echo(render_process(proc))
