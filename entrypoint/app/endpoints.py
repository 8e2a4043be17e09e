"""Where a client reaches a launch's servers: the process it talks to, that server's URL from
its own machine, and the name the server answers to (verify, bench, fleet, healthcheck)."""

from __future__ import annotations

from typing import Optional

from entrypoint.app.launch import Launch
from entrypoint.core.base.net import client_url
from entrypoint.core.compose.plan import Kind, Process


def front_process(launch: Launch) -> Process:
    """The process a client of the deployment talks to: this container's when KIMI_ROLE names it
    (or the plan is one engine per node), else the router, else the first engine."""
    if launch.selection.role or (launch.kv is None and not launch.plan.topology.pd):
        return launch.this_process()
    front = launch.plan.front
    if front is None:  # a plan always has an engine
        raise ValueError("the plan has no process a client talks to")
    return front


def local_url(launch: Launch, proc: Process, port: Optional[int] = None) -> str:
    """The URL of `proc`'s server as a client on its own machine reaches it (healthcheck, verify);
    `port` overrides the plan's (the port the start recorded)."""
    host: Optional[str]
    if proc.kind is Kind.ROUTER:
        host = launch.settings.router_host
    else:
        host = (proc.vllm.host if proc.vllm is not None else None) or launch.settings.host
    return client_url(host, port or proc.port or 8000)


def served_name(launch: Launch, proc: Process) -> str:
    """The name the server answers to: the engine's effective --served-model-name (its first
    name), else the model argument; the deployment's engines' for any other process."""
    return (proc.served_name if proc.is_engine else None) or launch.plan.served_name
