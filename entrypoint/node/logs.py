"""Start-up log: one line per decision (hardware, cluster wiring, each preflight result, cache).

Text (`kimi-serve: ...`) or one JSON object per line with KIMI_LOG_FORMAT=json. Secrets never
appear: values of secret-named variables are masked wherever they occur in a line.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Mapping, Optional, TextIO

from entrypoint.core.vllm.mask import mask_env, mask_output
from entrypoint.node.cache import cache_env
from entrypoint.node.cluster import wire

@dataclass(frozen=True)
class Entry:
    event: str  # hardware | cluster | preflight.<check> | cache | launch
    message: str
    level: str = "info"  # info | warning
    fields: dict = field(default_factory=dict)


class StartLog:
    def __init__(self, fmt: str = "text", environ: Optional[Mapping[str, str]] = None, stream: Optional[TextIO] = None):
        self.fmt = fmt
        self.stream = stream
        self._environ = dict(environ or {})  # secret-named variables, --api-key values

    def emit(self, entry: Entry) -> None:
        message = mask_output(entry.message, self._environ)
        stream = self.stream or sys.stderr
        if self.fmt == "json":
            fields = {k: (mask_env(v) if isinstance(v, dict) else v) for k, v in entry.fields.items()}
            record = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": entry.level,
                      "event": entry.event, "message": message, **fields}
            line = mask_output(json.dumps(record, default=str), self._environ)
        else:
            line = "kimi-serve: " + (message if entry.level == "info" else f"{entry.level}: {message}")
        print(line, file=stream, flush=True)

    def info(self, event: str, message: str, **fields) -> None:
        self.emit(Entry(event, message, "info", fields))

    def warning(self, event: str, message: str, **fields) -> None:
        self.emit(Entry(event, message, "warning", fields))


def log_decisions(launch, environ: Mapping[str, str], stream: Optional[TextIO] = None, wiring=None,
                  compiled=None) -> StartLog:
    """Log the start-up decisions made before preflight: settings warnings, hardware, cluster, cache.
    `wiring` is the cluster wiring the launch was built with (wired again when not given)."""
    settings = launch.settings
    log = StartLog(settings.log_format, environ, stream)
    for warning in settings.warnings:
        log.warning("settings", warning)
    configured = settings.hardware or settings.image_hardware
    origin = "KIMI_HARDWARE" if settings.hardware else "the image's default"
    log.info("hardware", f"hardware {launch.plan.hardware} ({origin}={configured})",
             hardware=launch.plan.hardware, configured=configured)
    wiring = wiring or wire(environ)
    for decision in wiring.decisions:
        log.info("cluster", decision, source=wiring.source)
    if launch.plan.topology.multi_node or launch.plan.topology.pd:
        log.info("cluster", f"node rank {settings.node_rank} of {launch.plan.nodes}, head {settings.head_addr}, "
                 f"interface {settings.iface}", rank=settings.node_rank, nodes=launch.plan.nodes,
                 head=settings.head_addr, iface=settings.iface)
    for note in launch.notes:  # e.g. a vLLM release judged by another's grammar
        log.warning("vllm", note)
    added = cache_env(settings.cache_dir, environ, compiled)
    if added:
        log.info("cache", "cache: " + " ".join(f"{k}={v}" for k, v in added.items()), env=added)
    return log
