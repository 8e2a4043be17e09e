"""What `kimi-serve bench` compares by and sends, from the configured launch's typed facts: the
deployment (recipe, hardware, variant, every engine's GPUs, the engines' TP), the URL, the
tokenizer's source and its cache; with --fleet, the fleet's router and copies too."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from entrypoint.app.endpoints import front_process, local_url
from entrypoint.app.fleet import fleet_targets
from entrypoint.app.launch import load_launch
from entrypoint.core.data.bench import Deployment
from entrypoint.node.cache import effective as cache_env


@dataclass(frozen=True)
class BenchTarget:
    deployment: Any  # entrypoint.core.data.bench.Deployment: recipe, hardware, variant, GPUs, TP
    url: str  # the service, as a client on this machine reaches it
    model: str  # what vLLM loads: the tokenizer's source
    trust_remote_code: bool
    cache_env: dict  # the launch's cache variables (HF_HOME ...), so the tokenizer comes from its cache
    engine: str = ""  # the engine whose facts these are (its role and rank)
    fleet: Any = None  # with --fleet: the fleet's router and copies (app/fleet.py FleetTargets)


def bench_target(environ: Optional[Mapping[str, str]] = None, fleet: bool = False) -> BenchTarget:
    """The configured launch, composed once: the deployment's GPUs (every engine's, over every
    node and instance), its engines' TP, the front process's URL; the fleet's addresses when
    `fleet`."""
    environ = os.environ if environ is None else environ
    launch = load_launch((), environ)
    found = None
    if fleet:
        found = fleet_targets(launch)
    plan = launch.plan
    proc = front_process(launch)
    engine = proc if proc.is_engine else plan.first_engine
    deployment = Deployment(recipe=launch.catalog.recipe.id, hardware=plan.hardware, variant=plan.variant,
                            gpus=plan.gpus, tensor_parallel=engine.vllm.tensor_parallel)
    cache = {k: v for k, v in cache_env(launch.settings.cache_dir, environ).items() if k != "HOME"}
    return BenchTarget(deployment, local_url(launch, proc), plan.tokenizer, engine.vllm.trust_remote_code, cache,
                       f"{engine.role} rank {engine.rank}", found)
