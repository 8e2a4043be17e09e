"""The pod of one process on Kubernetes: the project's image with the deployment's KIMI_* env,
the node's GPUs, the GPU product node selector, /dev/shm in memory, the cache and /health probes.

Node selector labels (one value per hardware id, as the labelling daemons write them):
NVIDIA GPU Feature Discovery sets `nvidia.com/gpu.product` (the product name, spaces as '-');
the AMD GPU Operator's node labeller sets `amd.com/gpu.product-name` (spaces as '_'). Check
yours with `kubectl get nodes -L nvidia.com/gpu.product -L amd.com/gpu.product-name`.
"""

from __future__ import annotations

from typing import Optional

from entrypoint.core.plan import Process
from entrypoint.render.deployment import (GPU_RESOURCE, HEALTH_PATH, HF_TOKEN, LOAD_SECONDS, container_env,
                                          hardware, image)

PRODUCT_LABEL = {"nvidia": "nvidia.com/gpu.product", "amd": "amd.com/gpu.product-name"}
PRODUCT = {
    "h100": "NVIDIA-H100-80GB-HBM3", "h200": "NVIDIA-H200", "b200": "NVIDIA-B200", "gb200": "NVIDIA-GB200",
    "b300": "NVIDIA-B300-SXM6-AC", "gb300": "NVIDIA-GB300",
    "mi300x": "AMD_Instinct_MI300X", "mi325x": "AMD_Instinct_MI325X", "mi350x": "AMD_Instinct_MI350X",
    "mi355x": "AMD_Instinct_MI355X",
}
CACHE_VOLUME = "cache"
SHM_VOLUME = "dshm"
CONTAINER = "kimi-serve"
_PERIOD = 30


def hf_token_secret(launch) -> str:
    """The Secret (key HF_TOKEN) the pods read the token from; optional, so public models need none."""
    return f"{launch.settings.name}-hf-token"


def _env(launch, proc: Process) -> list:
    env = [{"name": k, "value": v} for k, v in container_env(launch, proc).items()]
    return env + [{"name": HF_TOKEN, "valueFrom": {"secretKeyRef": {
        "name": hf_token_secret(launch), "key": HF_TOKEN, "optional": True}}}]


def _probes() -> dict:
    get = {"httpGet": {"path": HEALTH_PATH, "port": "http"}, "timeoutSeconds": 10}
    return {
        "startupProbe": {**get, "periodSeconds": _PERIOD, "failureThreshold": LOAD_SECONDS // _PERIOD},
        "readinessProbe": {**get, "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {**get, "periodSeconds": _PERIOD, "failureThreshold": 5},
    }


def pod_spec(launch, proc: Process, cache_claim: Optional[str]) -> dict:
    """`cache_claim`: the PVC to mount as the cache, or None when the owner (LeaderWorkerSet)
    gives each pod its own claim from a template named CACHE_VOLUME."""
    container = {"name": CONTAINER, "image": image(launch), "env": _env(launch, proc)}
    if proc.serves_http:
        container["ports"] = [{"name": "http", "containerPort": proc.port}]
        container.update(_probes())
    spec = {"enableServiceLinks": False, "containers": [container]}
    if proc.role == "router":
        return spec
    hw = hardware(launch)
    gpus = {GPU_RESOURCE[hw.brand]: str(proc.local_gpus)}
    container["resources"] = {"limits": gpus, "requests": dict(gpus)}
    container["volumeMounts"] = [{"name": CACHE_VOLUME, "mountPath": launch.settings.cache_dir},
                                 {"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    spec["nodeSelector"] = {PRODUCT_LABEL[hw.brand]: PRODUCT[launch.plan.hardware]}
    spec["volumes"] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    if cache_claim:
        spec["volumes"].append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache_claim}})
    return spec
