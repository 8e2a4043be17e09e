"""What `verify` and `bench` run against in a fleet (docs/fleet.md): the fleet's address (its router,
--url) and each copy's (--replica URL, repeatable), or the configured fleet's (--fleet)."""

from __future__ import annotations

from typing import List, Optional, Tuple


def fleet_urls(ctx, param, values) -> tuple:
    """--replica values: server roots (http://host:port)."""
    import click

    from entrypoint.core.base.bounded import parse_url

    for value in values:
        try:
            parse_url(value)
        except ValueError as exc:
            raise click.BadParameter(f"{exc}. Give a copy's API root, e.g. http://10.0.0.2:8000.") from None
    return tuple(values)


def with_fleet(url: Optional[str], replicas: tuple, found) -> Tuple[Optional[str], tuple]:
    """(the fleet's URL, the copies' URLs): the options, else the configured fleet's (`found`, an
    app/fleet.py FleetTargets read with the command's one launch; None without --fleet)."""
    if found is None:
        return url, replicas
    return url or found.url, replicas or found.replicas


def targets(url: str, replicas: tuple) -> List[Tuple[str, str]]:
    """(name, URL) of what to run against: the server alone, or the fleet then each copy."""
    if not replicas:
        return [("server", url)]
    return [("fleet", url)] + [(f"replica {i}", r) for i, r in enumerate(replicas, start=1)]
