"""`kimi-serve healthcheck`: which server of this container to ask, and where. cli/healthcheck.py
asks it (one GET, or one TCP connection) and answers 0/1."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from entrypoint.app.endpoints import local_url
from entrypoint.app.launch import load_launch
from entrypoint.core.base.net import client_url
from entrypoint.core.compose.fleet import ROLE as ROUTER
from entrypoint.core.compose.plan import Kind, Port
from entrypoint.core.compose.settings import read_settings
from entrypoint.core.data.recipe import load_catalog
from entrypoint.node.platform import recorded_port
from entrypoint.node.stopping import begin, begun


@dataclass(frozen=True)
class HealthTarget:
    """This container's process and what tells its health: an HTTP URL to GET, else a TCP port on
    loopback that must accept, else nothing (a process that serves nothing)."""

    role: str
    rank: int
    url: Optional[str] = None
    port: Optional[int] = None


def health_target(environ: Optional[Mapping[str, str]] = None) -> HealthTarget:
    """The weight cache's launcher (KIMI_PRELOAD) by its /health port; a KV helper (mooncake
    master, store, LMCache) by its TCP port; an HTTP server by its health path, at the port the
    container's start recorded (it may have had arguments this command does not see, e.g.
    SageMaker's `serve`) unless the settings name the port."""
    launch = load_launch((), environ)
    return health_target_of(launch, launch.this_process())


def health_target_of(launch, proc) -> HealthTarget:
    """What tells `proc`'s health (health_target), of a composed launch."""
    path = launch.catalog.serving.health.path
    if Port.HEALTH in proc.ports:
        return HealthTarget(proc.role, proc.rank, url=client_url(None, proc.ports[Port.HEALTH]) + path)
    if not proc.serves_http:
        return HealthTarget(proc.role, proc.rank, port=proc.port or None)
    told = launch.settings.is_set("router_port" if proc.kind is Kind.ROUTER else "port")
    return HealthTarget(proc.role, proc.rank, url=local_url(launch, proc, None if told else recorded_port()) + path)


def port_target(port: int, environ: Optional[Mapping[str, str]] = None) -> HealthTarget:
    """The HTTP server on `port` (the port a rendering wrote into its probe: `healthcheck --ready
    --port N`), without composing the launch: a readiness probe runs every few seconds. Its bind
    address is the settings' (the router's for KIMI_ROLE=router), the health path the serving data's."""
    settings = read_settings(os.environ if environ is None else environ)
    host = settings.router_host if settings.role == ROUTER else settings.host
    return HealthTarget(settings.role or "server", settings.node_rank,
                        url=client_url(host, port) + load_catalog().serving.health.path)


def stop_begun(environ: Mapping[str, str]) -> bool:
    """Whether this container's stop has begun (`kimi-serve drain`, node/stopping.py)."""
    return begun(environ)


def engines_drain_s(environ: Mapping[str, str]) -> int:
    """The engines' drain (KIMI_DRAIN_TIMEOUT) that a process backing them waits out before its SIGTERM."""
    return read_settings(environ).drain_timeout


def begin_stop(environ: Mapping[str, str]) -> str:
    """Mark this container as stopping (its readiness fails from now on); the mark's path."""
    return begin(environ)
