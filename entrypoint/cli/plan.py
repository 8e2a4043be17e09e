"""`kimi-serve plan`: every process of the configured deployment, or a batch of configurations."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Optional

import click

from entrypoint.app import load_launch
from entrypoint.cli._context import guarded
from entrypoint.core.errors import INVALID_VALUE, KimiError

# Deployment renderers: format -> module exposing `render(launch) -> {filename: text}`.
FILE_RENDERERS = {"compose": "entrypoint.render.compose", "k8s": "entrypoint.render.k8s",
                  "sagemaker": "entrypoint.render.sagemaker", "vertex": "entrypoint.render.vertex",
                  "azureml": "entrypoint.render.azureml", "skypilot": "entrypoint.render.skypilot"}


def _plan_json(launch) -> dict:
    from entrypoint.core.mask import mask_argv, mask_env

    return {"processes": [{"role": p.role, "rank": p.rank, "argv": mask_argv(p.argv), "env": mask_env(p.env)}
                          for p in launch.plan.processes]}


def batch_line(line: str) -> dict:
    """One JSON-lines entry: an object of KIMI_* variables -> the plan, or an error object."""
    from entrypoint.app import build

    try:
        try:
            env = json.loads(line)
        except json.JSONDecodeError as exc:
            raise KimiError(INVALID_VALUE, f"not a JSON object: {exc}") from None
        if not isinstance(env, dict):
            raise KimiError(INVALID_VALUE, "each line must be a JSON object of KIMI_* variables")
        env = {str(k): ("" if v is None else str(v)) for k, v in env.items()}
        return _plan_json(build(env))
    except KimiError as err:
        return {"error": err.as_dict()}


def _run_batch(path: str) -> None:
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")
    with stream:
        for line in stream:
            if not line.strip():
                continue
            sys.stdout.write(json.dumps(batch_line(line)) + "\n")


def _write_files(files: dict, output: Optional[str]) -> None:
    if output is None:
        for name, text in files.items():
            if len(files) > 1:
                click.echo(f"# --- {name}")
            click.echo(text.rstrip("\n"))
        return
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
        click.echo(f"wrote {out / name}", err=True)


@click.command()
@click.option("--format", "fmt", type=click.Choice(["shell", "json", *FILE_RENDERERS]), default="shell",
              show_default=True)
@click.option("--batch", "batch", metavar="FILE",
              help="JSON lines of KIMI_* objects ('-' = stdin); prints one JSON line per input line.")
@click.option("--output", "output", metavar="DIR", help="Write the rendered files (compose, k8s, sagemaker, vertex, azureml, skypilot) into DIR.")
@guarded
def command(fmt: str, batch: Optional[str], output: Optional[str]) -> None:
    """Print every process of the deployment: head and workers, prefill, decode and router."""
    if batch:
        _run_batch(batch)
        return
    if fmt in FILE_RENDERERS:
        _render_files(fmt, output)
        return
    launch = load_launch()
    if fmt == "json":
        click.echo(json.dumps(_plan_json(launch), indent=2))
    elif fmt == "shell":
        from entrypoint.render.shell import render_plan

        sel = launch.selection
        click.echo(render_plan(launch.plan, [f"Kimi-K2.5 on {sel.hardware}: variant {sel.variant}, strategy "
                                             f"{sel.strategy}, features {','.join(sel.features) or 'none'}"]))


def _render_files(fmt: str, output: Optional[str]) -> None:
    """A deployment is built from the rendering environment plus the addresses it gives its own
    containers (pod DNS names, loopback); never from this machine's network (no cluster wiring)."""
    from entrypoint.app import deployment_launch

    module = importlib.import_module(FILE_RENDERERS[fmt])
    _write_files(module.render(deployment_launch(module)), output)
