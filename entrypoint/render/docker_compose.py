"""`kimi-serve plan --format compose`: a Docker Compose file for a one-node deployment.

One service per process: a single node, or a PD cluster whose pools share the node (prefill,
decode and router). Every service uses the host network (NCCL, NIXL and the router reach the
pools on loopback, as vLLM's own Docker examples do), so ports are the processes' own.
A deployment of several nodes is not a Compose deployment: it is rendered for Kubernetes.

Hardened like the Kubernetes pods where Compose can be (docs/security.md): the image's non-root
user, a read-only root filesystem with tmpfs scratch for /tmp and HOME (exec allowed: Triton,
torch.compile and FlashInfer load the kernels they compile there), every capability dropped, no
new privileges, and the Hugging Face token as a secret file (HF_TOKEN_PATH). A brand's own
Compose access (recipes/hardware.yaml: AMD adds SYS_PTRACE and seccomp=unconfined, as AMD's vLLM
container guide does) comes on top; docs/security.md reasons those exceptions.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from entrypoint.core.base.errors import UNSUPPORTED_COMBINATION, KimiError
from entrypoint.core.compose.kv import choose
from entrypoint.core.compose.placement import check_one_host
from entrypoint.render.fleet import check_hosts
from entrypoint.core.compose.plan import Process
from entrypoint.render.deployment import (HF_TOKEN_PATH, TOKEN_FILE, brand, cache_mount, container_env,
                                          health, image, image_user, is_companion, scratch, service_name, stop,
                                          token_path, weight_cache, with_defaults)
from entrypoint.render.yamltext import dump
from entrypoint.core.compose.select import Selection
from entrypoint.core.compose.settings import Settings

FILE = "compose.yaml"
CACHE_VOLUME = "cache"
SOCKET_VOLUME = "weight-cache"  # KIMI_PRELOAD: the daemons' Unix sockets, mounted by the engine and the daemon
LOOPBACK = "127.0.0.1"
TOKEN_SECRET = "hf_token"
TOKEN_SOURCE = f"./{TOKEN_FILE}"  # the token file, beside the compose file (empty for a public model)
NO_NEW_PRIVILEGES = "no-new-privileges:true"


def deployment_environ(environ: Mapping[str, str], settings: Settings, sel: Selection) -> dict:
    """The rendering environment: the pools of a one-node PD cluster, and a KV store's master,
    store and instance, are reached on loopback."""
    _check_one_node(sel)
    check_hosts(settings, sel, "Compose")  # a fleet: the router before the copies' addresses (render/fleet.py)
    defaults = {}
    choice = choose(settings)
    if choice is not None and choice.store:
        if sel.prefill is None and choice.instances > 1:
            raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_KV_OFFLOAD={choice.id} with {choice.instances} instances "
                            "needs a node per instance, but a Compose file runs on one node: set KIMI_KV_INSTANCES=1, "
                            "or render Kubernetes manifests instead: kimi-serve plan --format k8s.")
        defaults.update({"KIMI_MOONCAKE_MASTER_ADDR": LOOPBACK, "KIMI_MOONCAKE_STORE_HOST": LOOPBACK})
        if sel.prefill is None:
            defaults["KIMI_INSTANCE_ADDRS"] = LOOPBACK
    if sel.prefill is not None:
        defaults.update({f"KIMI_{pool.name.upper()}_ADDRS": LOOPBACK for pool in sel.pd_pools.values()})
    return with_defaults(environ, defaults)


def _check_one_node(sel: Selection) -> None:
    way_out = "render Kubernetes manifests instead: kimi-serve plan --format k8s."
    if sel.is_multi_node:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_STRATEGY={sel.strategy} with KIMI_NODES={sel.nodes} spans "
                        f"{sel.nodes} nodes, but a Compose file runs on one node: " + way_out)
    pools = sel.pd_pools.values() if sel.prefill is not None else ()
    if any(pool.nodes > 0 for pool in pools):
        sizes = ", ".join(f"KIMI_{p.name.upper()}_NODES={p.nodes}" for p in pools)
        raise KimiError(UNSUPPORTED_COMBINATION, f"This PD cluster ({sizes}) spans several nodes, but a Compose file "
                        "runs on one node. Set KIMI_PREFILL_NODES=0 KIMI_DECODE_NODES=0 to share one node, or "
                        + way_out)


def hardened(launch, proc: Process) -> dict:
    """What every service gets: the image's user, the settings, the token file, a read-only root
    with scratch tmpfs, no capabilities, no new privileges."""
    # user: the UID alone, so the process keeps the image user's groups (video, render)
    return {"user": str(image_user(launch).uid),
            "environment": {**container_env(launch, proc), HF_TOKEN_PATH: token_path()},
            "secrets": [{"source": TOKEN_SECRET, "target": token_path()}],
            "read_only": True, "tmpfs": [f"{path}:exec,mode=1777" for path in scratch(launch).values()],
            "cap_drop": ["ALL"], "security_opt": [NO_NEW_PRIVILEGES]}


def _service(launch, proc: Process) -> dict:
    svc = {"image": image(launch), **hardened(launch, proc), "network_mode": "host", "restart": "unless-stopped"}
    if proc.local_gpus or is_companion(proc):  # LMCache's server takes the engine's GPU memory over IPC
        svc["ipc"] = "host"  # vLLM's tensor-parallel workers share memory through /dev/shm
        access = brand(launch).compose  # the GPU brand's devices (recipes/hardware.yaml)
        svc.update({**access, "security_opt": [*access.get("security_opt", []), NO_NEW_PRIVILEGES]})
    if proc.local_gpus:
        cache = weight_cache(launch)
        svc["volumes"] = [f"{CACHE_VOLUME}:{cache_mount(launch)}",
                          *([f"{SOCKET_VOLUME}:{cache[1].socket_volume}"] if cache else [])]
        svc["depends_on"] = {download_name(launch): {"condition": "service_completed_successfully"},
                             # what the engine connects to at start: LMCache's server, the KV store, the
                             # weight cache (healthy: every daemon holds its shard)
                             **{service_name(launch, p): {"condition": "service_healthy"}
                                for p in launch.plan.topology.helpers if p is not proc}}
    elif proc is launch.plan.topology.router:
        svc["depends_on"] = [service_name(launch, p) for p in launch.plan.engines]
    svc.update(stop_settings(launch, proc))
    h = health(launch)
    svc["healthcheck"] = {"test": ["CMD", "kimi-serve", "healthcheck"], "interval": f"{h.interval_s}s",
                          "timeout": f"{h.timeout_s}s", "retries": h.retries, "start_period": f"{h.start_period_s}s"}
    return svc


STOP_SIGNAL = "SIGTERM"  # what vLLM drains on (and the router's graceful shutdown); Docker's default, said out loud


def stop_settings(launch, proc: Process) -> dict:
    """`docker compose stop/down` (and a recreate on `up`): SIGTERM, then the drain and the exit
    before Docker's SIGKILL, KIMI_STOP_GRACE after the SIGTERM (the plan checked it holds them). No
    pause: no load balancer routes to a Compose service, and Compose stops a service's dependents
    first (the router before the engines, an engine before the KV helpers and LMCache's server it
    depends on), so each drains while what it needs still runs."""
    budget = stop(launch, proc)
    return {"stop_signal": STOP_SIGNAL, "stop_grace_period": f"{budget.grace_s}s"}


def download_name(launch) -> str:
    return f"{launch.name}-download"


def _download(launch) -> dict:
    """The one-shot service that fills the cache (`kimi-serve download`) before vLLM starts."""
    proc = next(p for p in launch.plan.processes if p.local_gpus)
    return {"image": image(launch), "command": ["download"], **hardened(launch, proc), "network_mode": "host",
            "volumes": [f"{CACHE_VOLUME}:{cache_mount(launch)}"], "restart": "no"}


def _header(launch) -> str:
    plan = launch.plan
    lines = [plan.headline(launch.catalog.recipe.title) + ".",
             "Rendered by `kimi-serve plan --format compose`; start it with `docker compose up -d`.",
             f"The Hugging Face token is read from the file {TOKEN_SOURCE} beside this file (empty for a public",
             f"model), readable by UID {image_user(launch).uid}: ( umask 077; printf %s \"$HF_TOKEN\" > {TOKEN_SOURCE} ); "
             f"sudo chown {image_user(launch).uid} {TOKEN_SOURCE}",
             f"The one-shot service {download_name(launch)} fills the cache volume first (`kimi-serve download`;",
             "resumable); the vLLM services start once it has exited 0.",
             "Hardened (docs/security.md). Host network; endpoints on this node:"]
    lines += [f"  {service_name(launch, p)}: {'http' if p.serves_http else 'tcp'}://<this node>:{p.port}"
              for p in plan.processes if p.port]
    return "".join(f"# {line}\n" for line in lines)


def render(launch) -> dict:
    _check_one_node(launch.selection)
    check_one_host(launch.plan)  # network_mode: host
    services = {download_name(launch): _download(launch),
                **{service_name(launch, p): _service(launch, p) for p in launch.plan.processes}}
    volumes: Dict[str, Any] = {CACHE_VOLUME: {}}
    if weight_cache(launch):  # a memory-backed volume: sockets only, gone with the host's restart
        volumes[SOCKET_VOLUME] = {"driver_opts": {"type": "tmpfs", "device": "tmpfs"}}
    doc = {"services": services, "volumes": volumes, "secrets": {TOKEN_SECRET: {"file": TOKEN_SOURCE}}}
    return {FILE: _header(launch) + dump(_literal(doc))}


def _literal(node):
    """Every string as Compose will read it back: Compose interpolates `$NAME`, `${NAME}` and
    `$$` in every value (a revision `a$b` would reach the container as `a`), so each `$` is
    written `$$`, which Compose reads as one `$`. Nothing this file carries is meant to be
    interpolated."""
    if isinstance(node, dict):
        return {_literal(key): _literal(value) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return [_literal(item) for item in node]
    return node.replace("$", "$$") if isinstance(node, str) else node
