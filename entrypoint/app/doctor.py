"""`kimi-serve doctor`'s report: what the node detection found, the platform's contract and the
cluster wiring, this container's launch, and every node check (whatever KIMI_PREFLIGHT says)."""

from __future__ import annotations

from typing import Any, Dict, Mapping

from entrypoint.app.launch import load_launch, wire_platform
from entrypoint.core.base.errors import KimiError, MISSING_SETTING
from entrypoint.core.compose.settings import read_settings
from entrypoint.node.cluster import wire
from entrypoint.node.detect import detect_node
from entrypoint.node.host import host_facts
from entrypoint.node import preflight
from entrypoint.node.preflight import run_checks


def _hardware_unset(environ: Mapping[str, str]) -> bool:
    """Neither KIMI_HARDWARE nor an image's own target: the launch is refused, as print refuses it."""
    try:
        settings = read_settings(environ)
    except KimiError:
        return False
    return not (settings.hardware or settings.image_hardware)


def diagnose(environ: Mapping[str, str]) -> dict:
    """The report as a dict (cli/doctor.py prints it). The launch is the one `print` shows: an
    unset KIMI_HARDWARE is the image's own target, and outside an image the same refusal, which
    here names the hardware the detection found; a launch that cannot be composed is the report's
    one failed check, and says what to set (never to run doctor: this is doctor)."""
    detection = detect_node(environ)
    report: Dict[str, Any] = {"detection": detection.as_dict(), "platform": None, "cluster": {"source": "", "decisions": []},
              "launch": None, "checks": []}
    try:
        platform = wire_platform((), environ)
        report["platform"] = platform.as_dict()
        environ = platform.environ
        wiring = wire(environ)
        report["cluster"] = {"source": wiring.source, "decisions": list(wiring.decisions)}
        launch = load_launch((), wiring=wiring, platform=platform)
        proc = launch.this_process()
    except KimiError as err:
        found = f" This node has {detection.hardware}: KIMI_HARDWARE={detection.hardware} (or auto)." \
            if detection.hardware and err.code == MISSING_SETTING and _hardware_unset(environ) else ""
        report["checks"].append({"check": "launch", "status": "error", "message": err.own + found})
        return report
    report["launch"] = {"recipe": launch.plan.recipe, "model": launch.plan.model,
                        "hardware": launch.plan.hardware, "variant": launch.plan.variant,
                        "strategy": launch.plan.strategy, "nodes": launch.plan.nodes, "role": proc.role,
                        "kind": proc.kind.value, "rank": proc.rank, "local_gpus": proc.local_gpus,
                        "port": proc.port, "ports": {p.value: n for p, n in proc.ports.items()},
                        "units": "ranks" if launch.catalog.hardware[launch.plan.hardware].host_backend else "GPUs"}
    if launch.catalog.hardware[launch.plan.hardware].host_backend is not None:  # the node is the device
        ram, cores = host_facts()
        report["host"] = {"cores": cores, "ram_gb": round(ram, 1), "ranks": proc.local_gpus,
                          "threads_per_rank": int(proc.env.get("OMP_NUM_THREADS", "1") or 1)}
    proc, results = run_checks(launch, proc, environ, preflight.node_facts(launch, environ))
    report["checks"] = [r.as_dict() for r in results]
    return report
