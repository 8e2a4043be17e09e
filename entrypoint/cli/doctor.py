"""`kimi-serve doctor`: what a person runs first on a new node. Detects the GPUs, builds this
container's launch, runs every preflight check (whatever KIMI_PREFLIGHT says) and prints a
table (or JSON). Exit 0 when nothing is an error, 1 otherwise."""

from __future__ import annotations

import json
import os
import sys

import click

from entrypoint.core.errors import KimiError

EXIT_PROBLEMS = 1


def diagnose(environ) -> dict:
    from entrypoint.app import load_launch
    from entrypoint.node.cluster import wire
    from entrypoint.node.detect import detect_node
    from entrypoint.node.preflight import node_facts, run_checks

    if not (environ.get("KIMI_HARDWARE") or environ.get("KIMI_IMAGE_HARDWARE")):
        environ = {**environ, "KIMI_HARDWARE": "auto"}  # a bare node: check what it has
    detection = detect_node(environ)
    wiring = wire(environ)
    report = {"detection": detection.as_dict(), "cluster": {"source": wiring.source, "decisions": list(wiring.decisions)},
              "launch": None, "checks": []}
    try:
        launch = load_launch((), wiring=wiring)
        proc = launch.this_process()
    except KimiError as err:
        report["checks"].append({"check": "launch", "status": "error", "message": err.message})
        return report
    report["launch"] = {"hardware": launch.plan.hardware, "variant": launch.plan.variant,
                        "strategy": launch.plan.strategy, "nodes": launch.plan.nodes, "role": proc.role,
                        "rank": proc.rank, "local_gpus": proc.local_gpus, "port": proc.port}
    proc, results = run_checks(launch, proc, environ, node_facts(launch, environ))
    report["checks"] = [r.as_dict() for r in results]
    return report


def render_text(report: dict) -> str:
    det = report["detection"]
    lines = [f"detected: {det['hardware'] or 'no known hardware'}: {det['count']} GPU(s) via {det['source'] or '-'} "
             f"({det['reason']})"]
    lines += [f"  probe {p['source']}: {p['saw']}" for p in det["probes"]]
    lines += [f"  GPU {g['index']}: {g['name'] or g['gfx']} {g['memory_gib']} GiB" for g in det["gpus"]]
    for decision in report["cluster"]["decisions"]:
        lines.append(f"cluster: {decision}")
    if report["launch"]:
        la = report["launch"]
        lines.append(f"launch: {la['hardware']} {la['variant']} {la['strategy']}, {la['role']} rank {la['rank']} "
                     f"of {la['nodes']} node(s), {la['local_gpus']} GPU(s) on this node")
    from entrypoint.core.table import text_table

    lines.append("")
    lines.append(text_table(("CHECK", "STATUS", "DETAIL"),
                            [(c["check"], c["status"], c["message"]) for c in report["checks"]]))
    return "\n".join(lines)


@click.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def command(fmt: str) -> None:
    """Detect the hardware, run every node check, print a report; exit 1 on any error."""
    report = diagnose(os.environ)
    report["ok"] = not any(c["status"] == "error" for c in report["checks"])
    click.echo(json.dumps(report, indent=2) if fmt == "json" else render_text(report))
    sys.exit(0 if report["ok"] else EXIT_PROBLEMS)
