"""`kimi-serve plan --format skypilot`: a SkyPilot task (`sky launch -c NAME kimi-k2-5.sky.yaml`).

The task runs the project's image on nodes with the hardware's accelerators; a multi-node plan
is SkyPilot's `num_nodes`, whose rank and addresses the container maps onto KIMI_NODE_RANK /
KIMI_HEAD_ADDR itself (SKYPILOT_* variables, docs/cloud.md). HF_TOKEN is declared without a value:
SkyPilot then requires it at launch (`--env HF_TOKEN`), so no token is ever written down.
"""

from __future__ import annotations

from entrypoint.core.base.errors import UNSUPPORTED_COMBINATION, KimiError
from entrypoint.render.deployment import (HF_TOKEN, KV_STORE, PD_CLUSTER, checkpoint_gb, image, is_companion,
                                          platform_env, platform_offering, refuse_fleet, serving_port, shape,
                                          with_defaults)
from entrypoint.render.yamltext import dump

PID = "skypilot"
DISK_HEADROOM = 2  # the checkpoint plus room for compiled graphs and a second download
RUN = "kimi-serve"  # the image's entrypoint program; it execs vLLM
# Rank 0's address is known only on the nodes (SKYPILOT_NODE_IPS); the plan is resolved with this
# stand-in, which no container receives (KIMI_HEAD_ADDR is never passed to one); each node finds
# its own interface (KIMI_IFACE=auto).
HEAD_STANDIN = {"KIMI_HEAD_ADDR": "skypilot-rank-0", "KIMI_IFACE": "auto"}


def task(launch) -> dict:
    found, offer = platform_offering(launch, PID)
    refuse_fleet(launch, found.display_name)  # SkyServe scales its own replicas
    if shape(launch) in (PD_CLUSTER, KV_STORE) or any(is_companion(p) for p in launch.plan.processes):
        raise KimiError(UNSUPPORTED_COMBINATION, "A prefill/decode cluster or a KV deployment (KIMI_KV_OFFLOAD with a "
                        "server beside the engine or a store) runs different processes, which one SkyPilot task does "
                        "not express: render Kubernetes (--format k8s).")
    env = platform_env(launch, PID)
    return {"name": launch.name,
            "resources": {"accelerators": offer.accelerators, "image_id": f"docker:{image(launch)}",
                          "disk_size": checkpoint_gb(launch) * DISK_HEADROOM, "ports": serving_port(launch)},
            "num_nodes": launch.plan.nodes, "envs": {**env, HF_TOKEN: None}, "run": RUN}


def deployment_environ(environ, settings, sel) -> dict:
    return with_defaults(environ, HEAD_STANDIN) if sel.is_multi_node else dict(environ)


def file_name(launch) -> str:
    return f"{launch.name}.sky.yaml"


def render(launch) -> dict:
    return {file_name(launch): dump(task(launch))}
