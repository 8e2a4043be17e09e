"""What `kimi-serve verify` expects of the configured service: the URL a client on this machine
uses, the served model name, the enabled features and the recipe's chat facts; with --fleet,
the fleet's router and copies too. One launch (one selection) gives all of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from entrypoint.app.endpoints import front_process, local_url, served_name
from entrypoint.app.fleet import FleetTargets, fleet_targets
from entrypoint.app.launch import Launch, load_launch
from entrypoint.verify.checks import ChatFacts


@dataclass(frozen=True)
class ServiceExpectations:
    """What a client of the configured service should find."""

    url: str
    served_model_name: str
    features: frozenset
    chat: Any = None  # entrypoint.verify.checks.ChatFacts of the recipe


@dataclass(frozen=True)
class VerifyTargets:
    """What verify reads from the configuration: the expectations unless the options give them
    all, the fleet's addresses with --fleet."""

    expected: Optional[ServiceExpectations]
    fleet: Optional[FleetTargets]


def expectations(launch: Launch) -> ServiceExpectations:
    """The service `launch` runs, as its front process serves it (app/endpoints.py)."""
    proc = front_process(launch)
    return ServiceExpectations(url=local_url(launch, proc), served_model_name=served_name(launch, proc),
                               features=frozenset(launch.plan.features), chat=ChatFacts.of(launch.catalog.recipe, launch.catalog.serving.streams.idle_timeout_s))


def verify_targets(expected: bool, fleet: bool, environ: Optional[Mapping[str, str]] = None) -> VerifyTargets:
    """The configured launch, composed once, read for what verify asks: its expectations when
    `expected`, its fleet's addresses when `fleet`."""
    launch = load_launch((), environ)
    found = fleet_targets(launch) if fleet else None
    return VerifyTargets(expected=expectations(launch) if expected else None, fleet=found)
