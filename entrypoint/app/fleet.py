"""A configured fleet's addresses as a client reaches them (verify --fleet, bench --fleet): the
fleet's router and each copy's API root (core/compose/fleet.py, docs/fleet.md)."""

from __future__ import annotations

from dataclasses import dataclass

from entrypoint.app.endpoints import local_url
from entrypoint.app.launch import Launch
from entrypoint.core.base.errors import KimiError, MISSING_SETTING
from entrypoint.core.base.net import url_host
from entrypoint.core.compose.fleet import replica_hosts


@dataclass(frozen=True)
class FleetTargets:
    """A fleet's addresses as a client reaches them: its router, each copy."""

    url: str  # the fleet's router
    replicas: tuple  # each copy's API root (KIMI_REPLICA_ADDRS at the engines' port)


def fleet_targets(launch: Launch) -> FleetTargets:
    """The launch's fleet router and copies; a clear error when the launch is no fleet with
    addresses. A PD unit has no API of its own: its copies are reached through the router only."""
    router = launch.plan.topology.router
    if launch.fleet is None or router is None or not launch.fleet.addrs:
        raise KimiError(MISSING_SETTING, "--fleet checks the configured fleet's router and each copy: set "
                        "KIMI_REPLICA_ADDRS (one address per copy), or give --url (the router) and --replica URL "
                        "for each copy.")
    port = next(p.port for p in launch.plan.engines if p.serves_http)
    replicas = () if launch.plan.topology.pd else tuple(
        f"http://{url_host(h)}:{port}" for h in replica_hosts(launch.fleet))
    return FleetTargets(url=local_url(launch, router), replicas=replicas)
