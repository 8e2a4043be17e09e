"""`kimi-serve doctor`: what a person runs first on a new node. Detects the GPUs, builds this
container's launch, runs every preflight check (whatever KIMI_PREFLIGHT says) and prints a
table (or JSON). Exit 0 when nothing is an error, 1 otherwise."""

from __future__ import annotations

import json
import os
import sys

import click

from entrypoint.cli._context import echo, guarded

EXIT_PROBLEMS = 1


def render_text(report: dict) -> str:
    det = report["detection"]
    lines = [f"detected: {det['hardware'] or 'no known hardware'}: {det['count']} GPU(s) via {det['source'] or '-'} "
             f"({det['reason']})"]
    lines += [f"  probe {p['source']}: {p['saw']}" for p in det["probes"]]
    lines += [f"  GPU {g['index']}: {g['name'] or g['gfx']} {g['memory_gib']} GiB" for g in det["gpus"]]
    plat = report.get("platform")
    if plat:
        lines.append(f"platform: {plat['platform'] or 'none'} ({plat['name'] or plat['reason']}"
                     + (f", chosen by {plat['reason']})" if plat["platform"] else ")"))
        lines += [f"  {d}" for d in plat["decisions"]]
    for decision in report["cluster"]["decisions"]:
        lines.append(f"cluster: {decision}")
    if report["launch"]:
        la = report["launch"]
        lines.append(f"launch: {la['recipe']} ({la['model']}) on {la['hardware']} {la['variant']} {la['strategy']}, {la['role']} rank {la['rank']} "
                     f"of {la['nodes']} node(s), {la['local_gpus']} {la.get('units', 'GPUs')} on this node")
    if report.get("host"):
        host = report["host"]
        lines.append(f"host: {host['cores']} cores, {host['ram_gb']} GB of RAM; {host['ranks']} rank(s) x "
                     f"{host['threads_per_rank']} thread(s)")
    from entrypoint.core.base.table import text_table

    lines.append("")
    lines.append(text_table(("CHECK", "STATUS", "DETAIL"),
                            [(c["check"], c["status"], c["message"]) for c in report["checks"]]))
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@guarded
def command(fmt: str) -> None:
    """Detect the hardware, run every node check, print a report; exit 1 on any error."""
    from entrypoint.app.doctor import diagnose

    report = diagnose(os.environ)
    report["ok"] = not any(c["status"] == "error" for c in report["checks"])

    text = json.dumps(report, indent=2) if fmt == "json" else render_text(report)
    echo(text)
    sys.exit(0 if report["ok"] else EXIT_PROBLEMS)
