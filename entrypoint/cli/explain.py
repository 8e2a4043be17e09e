"""`kimi-serve explain`: for each flag and variable of the launch, the layer it came from."""

from __future__ import annotations

import json
import os

import click

from entrypoint.app.launch import load_launch
from entrypoint.cli._context import echo, guarded


def explain_rows(proc, environ) -> list:
    """(kind, name, value, source) for every flag and env var of one process."""
    from entrypoint.core.vllm.args import display_units
    from entrypoint.core.vllm.mask import mask_argv, mask_env

    rows = []
    for key, unit in display_units(mask_argv(proc.args), proc.is_engine):
        if key is None:
            continue
        first = unit[0][0]
        value = " ".join(([first.split("=", 1)[1]] if "=" in first else []) + [t for t, _ in unit[1:]])
        rows.append(("flag", key, value, proc.provenance.get(key, "strategy")))
    env = mask_env(proc.env)
    for key, value in env.items():
        source = proc.provenance.get(key, "strategy")
        if key in environ:
            value, source = mask_env({key: environ[key]})[key], f"user (environment; recipe: {source})"
        rows.append(("env", key, value, source))
    return rows


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--all", "all_processes", is_flag=True, help="Explain every process of the plan, not only this one.")
@guarded
def command(fmt: str, all_processes: bool) -> None:
    """Where each flag and variable came from: base, variant, strategy, hardware override, feature,
    profile, settings or user."""
    launch = load_launch()
    procs = launch.plan.processes if all_processes else (launch.this_process(),)
    sel = launch.selection
    platform = launch.platform.as_dict() if launch.platform else None
    if fmt == "json":
        echo(json.dumps([{"role": p.role, "rank": p.rank, "platform": platform,
                          "items": [dict(zip(("kind", "name", "value", "source"), r))
                                    for r in explain_rows(p, os.environ)]} for p in procs], indent=2))
        return
    echo(f"{launch.plan.headline(launch.catalog.recipe.title)}; model {sel.model}")
    if platform and platform["platform"]:
        echo(f"platform contract: {platform['platform']} ({platform['name']}), chosen by {platform['reason']}")
        for line in platform["decisions"]:
            echo(f"  {line}")
    for proc in procs:
        echo(f"\n{proc.role} rank {proc.rank}: {' '.join(proc.program)}")
        rows = explain_rows(proc, os.environ)
        width = max((len(r[1]) + len(r[2]) for r in rows), default=0) + 2
        for kind, name, value, source in rows:
            shown = f"{name} {value}".strip() if kind == "flag" else f"{name}={value}"
            echo(f"  {shown.ljust(width)}  <- {source}")
