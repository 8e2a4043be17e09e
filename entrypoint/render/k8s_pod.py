"""The pod of one process on Kubernetes: the project's image with the deployment's KIMI_* env,
the node's GPUs, the GPU product node selector, /dev/shm in memory, the cache and health probes.

GPU resource names, product labels and their values per hardware live in recipes/hardware.yaml
(`brands`, `k8s_product`); probe timings in recipes/serving.yaml.
"""

from __future__ import annotations

from typing import Optional

from entrypoint.core.plan import Process
from entrypoint.render.deployment import HF_TOKEN, brand, container_env, hardware, health, image

CACHE_VOLUME = "cache"
SHM_VOLUME = "dshm"
CONTAINER = "kimi-serve"
DOWNLOAD_CONTAINER = "download"


def hf_token_secret(launch) -> str:
    """The Secret (key HF_TOKEN) the pods read the token from; optional, so public models need none."""
    return f"{launch.settings.name}-hf-token"


def _env(launch, proc: Process) -> list:
    env = [{"name": k, "value": v} for k, v in container_env(launch, proc).items()]
    return env + [{"name": HF_TOKEN, "valueFrom": {"secretKeyRef": {
        "name": hf_token_secret(launch), "key": HF_TOKEN, "optional": True}}}]


def _probes(launch) -> dict:
    h = health(launch)
    get = {"httpGet": {"path": h.path, "port": "http"}, "timeoutSeconds": h.timeout_s}
    return {
        "startupProbe": {**get, "periodSeconds": h.interval_s, "failureThreshold": -(-h.start_period_s // h.interval_s)},
        "readinessProbe": {**get, "periodSeconds": h.interval_s, "failureThreshold": h.retries},
        "livenessProbe": {**get, "periodSeconds": h.interval_s, "failureThreshold": h.retries},
    }


def pod_spec(launch, proc: Process, cache_claim: Optional[str]) -> dict:
    """`cache_claim`: the PVC to mount as the cache, or None when the owner (LeaderWorkerSet)
    gives each pod its own claim from a template named CACHE_VOLUME."""
    container = {"name": CONTAINER, "image": image(launch), "env": _env(launch, proc)}
    if proc.serves_http:
        container["ports"] = [{"name": "http", "containerPort": proc.port}]
        container.update(_probes(launch))
    spec = {"enableServiceLinks": False, "containers": [container]}
    if proc.role == "router":
        return spec
    gpu = brand(launch)
    gpus = {gpu.k8s_resource: str(proc.local_gpus)}
    container["resources"] = {"limits": gpus, "requests": dict(gpus)}
    container["volumeMounts"] = [{"name": CACHE_VOLUME, "mountPath": launch.settings.cache_dir},
                                 {"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    # The weights first: `kimi-serve download` into this pod's cache (resumable; a restarted pod
    # fetches only what is missing), so the vLLM container starts on complete, verified-size files.
    spec["initContainers"] = [{"name": DOWNLOAD_CONTAINER, "image": container["image"], "args": ["download"],
                               "env": container["env"], "volumeMounts": container["volumeMounts"][:1]}]
    spec["nodeSelector"] = {gpu.k8s_product_label: hardware(launch).k8s_product}
    spec["volumes"] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    if cache_claim:
        spec["volumes"].append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache_claim}})
    return spec
