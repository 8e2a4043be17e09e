"""The launch plan: every process of a deployment, with argv, env and where each piece came from.

A Plan is what the pure resolver returns; renderers, preflight and exec only read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

@dataclass(frozen=True)
class Process:
    """One program to run on one node."""

    role: str  # single | head | worker | prefill | decode | router | master | store | instance | lmcache
    rank: int  # node rank (multi-node) or node index within its pool (PD); 0 otherwise
    argv: tuple  # full argv, argv[0] is the program ("vllm" or "vllm-router")
    env: dict  # only what the project sets (user-set variables are never overridden at exec)
    # For each flag (e.g. "--tensor-parallel-size") and env name: the layer it came from
    # ("base", "variant", "strategy", "hardware override", "feature:<id>", "profile:<id>", "user").
    provenance: dict = field(default_factory=dict)
    local_gpus: int = 0  # GPUs this process needs visible on its node (0 for the router)
    port: Optional[int] = None  # the port it listens on: vLLM's HTTP API when serves_http, else a TCP service
    serves_http: bool = True
    # Configuration files the entrypoint writes before exec: {absolute path: text} (KV stores).
    files: dict = field(default_factory=dict)
    # Seconds the process drains its running requests after SIGTERM (an engine's effective
    # --shutdown-timeout; the router and the KV helpers: the deployment's budget). 0 = none.
    drain_s: int = 0

    def as_dict(self) -> dict:
        out = {"role": self.role, "rank": self.rank, "argv": list(self.argv), "env": dict(self.env)}
        if self.files:
            out["files"] = dict(self.files)
        return out


def with_helper_drain(processes) -> tuple:
    """The processes, each one without GPUs (the router, the KV helpers) given the engines' longest
    drain: it keeps serving them (proxying their streams, holding their KV) while they drain."""
    import dataclasses

    drain = max((p.drain_s for p in processes if p.local_gpus), default=0)
    return tuple(p if p.local_gpus else dataclasses.replace(p, drain_s=drain) for p in processes)


@dataclass(frozen=True)
class Pool:
    """A group of nodes that together hold one copy of the model (checked for memory)."""

    name: str  # "deployment", "prefill", "decode"
    nodes: int  # 0 = half of one node shared with the other pool
    gpus: int  # GPUs the pool really has
    vram_gb: float  # memory those GPUs hold


@dataclass(frozen=True)
class Choice:
    """What a deployment is: the choices a Selection makes and its Plan carries."""

    recipe: str  # the recipe's slug (recipes/models/<slug>.yaml)
    hardware: str
    variant: str
    strategy: str
    features: tuple
    profile: Optional[str]
    nodes: int

    def headline(self, title: str) -> str:
        """The one line that names a deployment (`title` is the recipe's), for every header."""
        return (f"{title} on {self.hardware}: variant {self.variant}, strategy {self.strategy}, features "
                f"{','.join(self.features) or 'none'}, profile {self.profile or 'none'}")


@dataclass(frozen=True)
class Plan(Choice):
    model: str  # the model argument given to vLLM
    served_model_name: str  # the name clients use
    vram_minimum_gb: float
    pools: tuple  # of Pool
    processes: tuple  # of Process

    def as_dict(self) -> dict:
        return {"recipe": self.recipe, "processes": [p.as_dict() for p in self.processes]}

    def find(self, role: str, rank: int) -> Optional[Process]:
        for proc in self.processes:
            if proc.role == role and proc.rank == rank:
                return proc
        return None
