"""The pod of one process on Kubernetes: the project's image with the deployment's KIMI_* env,
the node's GPUs, the GPU product node selector, /dev/shm in memory, the cache and /health probes,
hardened to the Pod Security Standards' `restricted` profile (docs/security.md).

GPU resource names, product labels and their values per hardware live in recipes/hardware.yaml
(`brands`, `k8s_product`); probe timings in recipes/serving.yaml.

Security: the image's non-root user (runAsNonRoot, a high UID and GID, fsGroup so the cache
claim is writable), seccomp RuntimeDefault, every capability dropped, no privilege escalation, a
read-only root filesystem with emptyDir scratch for /tmp and HOME, no service-account token, the
Hugging Face token as a file (HF_TOKEN_PATH) from an optional Secret, CPU and memory sized from
the hardware data (Guaranteed QoS). What cannot be met is a checkov skip annotation with its
reason (`skip_annotations`), never left silent.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Optional

from entrypoint.core.base.errors import KimiError, UNSUPPORTED_COMBINATION
from entrypoint.core.compose.plan import Process
from entrypoint.core.compose.settings import BY_NAME, ENV_ONLY, KIMI_FIELDS
from entrypoint.render.deployment import (HF_TOKEN, HF_TOKEN_PATH, SHM, TERMINATION_MESSAGE, TOKEN_DIR, TOKEN_FILE, brand,
                                          cache_mount, container_env, hardware, health, helper_resources, image,
                                          image_user, passed, pinned, pinned_settings, scratch, startup_bound, stop,
                                          token_path)
from entrypoint.render.deployment import weight_cache

CACHE_VOLUME = "cache"
SHM_VOLUME = "dshm"
TOKEN_VOLUME = "hf-token"
CONTAINER = "kimi-serve"
DOWNLOAD_CONTAINER = "download"
ARCH_LABEL = "kubernetes.io/arch"  # the kubelet's own node label
SKIP_ANNOTATION = "checkov.io/skip{}"  # checkov's own: `CKV_ID=reason` (the reason holds no '=')
RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


def hf_token_secret(launch) -> str:
    """The Secret (key HF_TOKEN) the pods read the token from; optional, so public models need none."""
    return f"{launch.name}-hf-token"


# Each reason a pod cannot meet a check (the Helm chart draws the same texts from files/facts.json).
SKIP_REASONS = {
    "headless": ("a headless vLLM worker serves no endpoint to probe; it exits when its engine fails "
                 "and the LeaderWorkerSet then recreates the whole group; the head's probes cover it"),
    "tag": ("no digest is locked for this image (image.digests in recipes/serving.yaml), so it "
            "is referenced by tag; lock one there or set KIMI_IMAGE to repository@sha256:digest"),
    # the Helm chart's `helm test` Pod (kimi-serve verify): it runs once and exits
    "test": "a helm test Pod runs kimi-serve verify once and exits with its verdict; it serves nothing to probe",
    # the Helm chart's pre-install/pre-upgrade check (kimi-serve plan --check): it runs once and exits
    "check": ("the chart's pre-install check runs kimi-serve plan --check once and exits with its verdict "
              "(plan's message where it refuses); it serves nothing to probe"),
}


def skip_annotations(launch, proc: Process) -> dict:
    """checkov skip annotations, each with its reason, for what the pod of `proc` cannot meet."""
    skips = {}
    if not proc.serves_http and not proc.port:
        for check in ("CKV_K8S_8", "CKV_K8S_9"):
            skips[check] = SKIP_REASONS["headless"]
    if not pinned(image(launch)):
        skips["CKV_K8S_43"] = SKIP_REASONS["tag"]
    return {SKIP_ANNOTATION.format(i): f"{check}={reason}" for i, (check, reason) in enumerate(sorted(skips.items()), 1)}


def env_list(env) -> list:
    """Kubernetes env entries whose values read back as given: the kubelet expands `$(NAME)` in a
    value and reduces `$$` to `$` (dependent environment variables), so every `$` is written `$$`."""
    return [{"name": k, "value": str(v).replace("$", "$$")} for k, v in env.items()]


SETTINGS_KEY = "settings.json"  # the key of the `<name>-settings` ConfigMap
_CONFIG_JSON = BY_NAME["config_json"].env
# Go's encoding/json (Helm's toJson) writes these escaped; the chart's ConfigMap holds the same bytes
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


_SETTING_OF = {f.env: f.name for f in KIMI_FIELDS}


def given_passed(launch) -> dict:
    """The user's settings as written that reach the containers (deployment.passed): every
    container reads them from the `<name>-settings` ConfigMap (KIMI_CONFIG_JSON), untouched."""
    return {k: v for k, v in sorted((getattr(launch, "given", None) or {}).items())
            if k not in ENV_ONLY and passed(BY_NAME[k])}


def settings_json(launch) -> str:
    """given_passed as JSON, keys sorted, written as Helm's toJson writes the chart's settings."""
    text = json.dumps(given_passed(launch), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in _GO_ESCAPES.items():
        text = text.replace(char, escaped)
    return text


# On every pod template that reads the settings ConfigMap: a changed setting changes the template, so
# `kubectl apply` (or `helm upgrade`) rolls the pods, as a changed variable did (Helm's checksum idiom)
SETTINGS_CHECKSUM = "checksum/settings"


def settings_checksum(launch) -> str:
    """sha256 of the ConfigMap's settings.json, as Sprig's sha256sum writes it (hex)."""
    return hashlib.sha256(settings_json(launch).encode("utf-8")).hexdigest()


def settings_map_name(launch) -> str:
    return f"{launch.name}-settings"


# The addresses of a pod's peers (render/k8s.py peer_addresses): no pod carries them; each container
# names them itself from the deployment's name (KIMI_PEER_NAMES=k8s, app/launch.py with_peers)
PEER_SETTINGS = frozenset({"prefill_addrs", "decode_addrs", "mooncake_master_addr", "mooncake_store_host",
                           "instance_addrs"})


def k8s_env(launch, proc: Process, token: bool = True) -> list:
    """A container's environment: the user's settings from the ConfigMap as written (KIMI_CONFIG_JSON,
    the first variable), then, as variables, only what the deployment adds: its name, by which the
    container names its peers (KIMI_NAME, KIMI_PEER_NAMES=k8s), the pinned choices
    (deployment.pinned_settings), the addresses it gives its pods where the user gave none (a
    fleet's discovery, the interface), the process's role; the token's path (`token`: a process
    that downloads or loads)."""
    given, pins = given_passed(launch), pinned_settings(launch)
    env = {k: v for k, v in container_env(launch, proc).items()
           if (k not in _SETTING_OF or _SETTING_OF[k] not in given or _SETTING_OF[k] in pins)
           and _SETTING_OF.get(k) not in PEER_SETTINGS}
    ref = {"name": _CONFIG_JSON, "valueFrom": {"configMapKeyRef": {"name": settings_map_name(launch), "key": SETTINGS_KEY}}}
    named = {BY_NAME["name"].env: launch.name, BY_NAME["peer_names"].env: "k8s"}
    return [ref, *env_list({**named, **env, **({HF_TOKEN_PATH: token_path()} if token else {})})]



READY = ["kimi-serve", "healthcheck", "--ready"]  # readiness: /health, and no stop begun (node/stopping.py)


def _probes(launch, port: int) -> dict:
    """Liveness is vLLM's /health; readiness is /health and no stop begun (`kimi-serve healthcheck
    --ready`), asked every `stop.readiness_period_s` and failing at once: a stop takes the pod out of
    rotation before vLLM, healthy while it drains, gets its SIGTERM (docs/day2.md). The probe is
    given the server's `port`, so it composes no launch every few seconds."""
    h, period = health(launch), launch.catalog.serving.stop.readiness_period_s
    get = {"httpGet": {"path": h.path, "port": "http"}, "timeoutSeconds": h.timeout_s}
    ready = {"exec": {"command": [*READY, "--timeout", str(min(h.timeout_s, period)), "--port", str(port)]},
             "timeoutSeconds": min(h.timeout_s, period) + 1}
    return {
        "startupProbe": {**get, "periodSeconds": h.interval_s, "failureThreshold": -(-startup_bound(launch) // h.interval_s)},
        "readinessProbe": {**ready, "periodSeconds": period, "failureThreshold": 1},
        "livenessProbe": {**get, "periodSeconds": h.interval_s, "failureThreshold": h.retries},
    }


def helper_probes(launch) -> dict:
    """Probes of a process that serves no HTTP but listens (mooncake_master, the store, LMCache)."""
    h = health(launch)
    check = {"exec": {"command": ["kimi-serve", "healthcheck"]}, "timeoutSeconds": h.timeout_s,
             "periodSeconds": h.interval_s}
    return {"startupProbe": {**check, "failureThreshold": 30}, "readinessProbe": {**check, "failureThreshold": h.retries},
            "livenessProbe": {**check, "failureThreshold": h.retries}}


def _resources(launch, proc: Process) -> dict:
    """Requests = limits (Guaranteed QoS): the GPUs, and the process's share of the node's CPU and
    memory from the hardware data (the router's from its strategy's); a host backend's node pod
    (KIMI_HARDWARE=cpu) whole, whatever ranks it runs, as its settings give it (recipe.with_host)."""
    hw = hardware(launch)
    if proc.local_gpus and hw.host_backend is not None:
        amounts = {"cpu": str(hw.pod_resources.cpu), "memory": hw.pod_resources.memory}
        return {"limits": amounts, "requests": dict(amounts)}
    if not proc.local_gpus:  # the router, a KV helper (recipes/kv_offload.yaml)
        sized, share, gpus = helper_resources(launch, proc), 1, {}
    else:
        sized, share = hw.pod_resources, proc.local_gpus / hw.gpu_count
        resource = brand(launch).k8s_resource
        gpus = {resource: str(proc.local_gpus)} if resource else {}
    amounts = {"cpu": str(math.ceil(sized.cpu * share)), "memory": f"{math.ceil(sized.memory_gib * share)}Gi", **gpus}
    return {"limits": amounts, "requests": dict(amounts)}


def pod_security(launch, proc: Process) -> dict:
    user = image_user(launch)
    ctx = {"runAsNonRoot": True, "runAsUser": user.uid, "runAsGroup": user.gid, "fsGroup": user.gid,
           # a 600 GB cache would be walked and chowned on every start otherwise
           "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": dict(RUNTIME_DEFAULT)}
    groups = brand(launch).k8s_supplemental_groups if proc.local_gpus else []
    if groups:
        ctx["supplementalGroups"] = list(groups)
    return ctx


def restricted_container(uid: int, gid: int) -> dict:
    """A container's securityContext under Pod Security `restricted`, running as uid:gid: no
    privilege escalation, a read-only root, no capabilities, the runtime's seccomp profile (every
    container we draw: the engines', the router's, the Gateway's endpoint picker's)."""
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid, "allowPrivilegeEscalation": False,
            "privileged": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": dict(RUNTIME_DEFAULT)}


def container_security(launch) -> dict:
    user = image_user(launch)
    return restricted_container(user.uid, user.gid)


def scratch_and_token(launch):
    """(mounts, volumes) every pod has: emptyDir scratch (read-only root) and the optional token Secret."""
    mounts = [{"name": name, "mountPath": path} for name, path in scratch(launch).items()]
    volumes = [{"name": name, "emptyDir": {}} for name in scratch(launch)]
    mounts.append({"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True})
    volumes.append({"name": TOKEN_VOLUME, "secret": {"secretName": hf_token_secret(launch), "optional": True,
                                                     "defaultMode": 0o440,
                                                     "items": [{"key": HF_TOKEN, "path": TOKEN_FILE}]}})
    return mounts, volumes


def _volumes(launch, proc: Process, cache_claim: Optional[str]):
    """(mounts, volumes): scratch and the token for every pod; /dev/shm and the cache for GPU pods."""
    mounts, volumes = scratch_and_token(launch)
    if not proc.local_gpus:
        return mounts, volumes
    mounts += [{"name": CACHE_VOLUME, "mountPath": cache_mount(launch)},
               {"name": SHM_VOLUME, "mountPath": SHM}]
    volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}})
    if cache_claim:
        volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache_claim}})
    return mounts, volumes


def pre_stop(budget, serves: bool = False) -> dict:
    """The container's stop. A process that serves clients (an engine's API, the router): `kimi-serve
    drain --pause`, which takes it out of readiness and waits the pause; one that backs the engines
    (a headless worker, a KV helper): `--through-drain`, which waits the pause and then the drain
    (KIMI_DRAIN_TIMEOUT, read by the container itself: the object holds no sum of them)."""
    command = ["kimi-serve", "drain", "--pause", str(budget.pause_s)]
    return {"preStop": {"exec": {"command": command if serves else [*command, "--through-drain"]}}}


def pod_spec(launch, proc: Process, cache_claim: Optional[str]) -> dict:
    """`cache_claim`: the PVC to mount as the cache, or None when the owner (LeaderWorkerSet)
    gives each pod its own claim from a template named CACHE_VOLUME."""
    mounts, volumes = _volumes(launch, proc, cache_claim)
    container = {"name": CONTAINER, "image": image(launch), "imagePullPolicy": "Always", **TERMINATION_MESSAGE,
                 "env": k8s_env(launch, proc),
                 "resources": _resources(launch, proc), "securityContext": container_security(launch),
                 "volumeMounts": mounts, "lifecycle": pre_stop(stop(launch, proc), serves=proc.serves_http)}
    if proc.serves_http:
        container["ports"] = [{"name": "http", "containerPort": proc.port}]
        container.update(_probes(launch, proc.port or 8000))  # vLLM's default, as every reader of the plan
    elif proc.port:  # a KV helper: its TCP port, checked by `kimi-serve healthcheck` (it connects)
        container["ports"] = [{"name": "tcp", "containerPort": proc.port}]
        container.update(helper_probes(launch))
    # the grace period holds the pause, the drain and the exit of every container of the pod
    grace = stop(launch, proc).grace_s  # KIMI_STOP_GRACE, as given: the plan checked it holds every drain
    spec = {"enableServiceLinks": False, "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": grace,
            "securityContext": pod_security(launch, proc), "containers": [container], "volumes": volumes}
    # every pod on a node that can run the image: the hardware's architecture (recipes/hardware.yaml
    # `arch`, the image target's platform): the gb200/gb300 images are arm64 only, so a router or a
    # KV helper (no GPU) must not land on a cluster's amd64 system nodes; a GPU pod also on its product
    spec["nodeSelector"] = {ARCH_LABEL: hardware(launch).arch}
    if proc.local_gpus:
        spec["initContainers"] = [_download(container)]
        label = brand(launch).k8s_product_label
        if label:
            spec["nodeSelector"][label] = hardware(launch).k8s_product
    return spec


def _download(container: dict) -> dict:
    """The weights first: `kimi-serve download` into this pod's cache (resumable; a restarted pod
    fetches only what is missing), so the vLLM container starts on complete, verified-size files.
    Hardened like the server; the CPU and memory of the server (no GPU), so the pod stays
    Guaranteed."""
    resources = {kind: {k: v for k, v in amounts.items() if k in ("cpu", "memory")}
                 for kind, amounts in container["resources"].items()}
    mounts = [m for m in container["volumeMounts"] if m["mountPath"] != SHM]
    container = {k: v for k, v in container.items() if k != "lifecycle"}  # an init container has none
    return {"name": DOWNLOAD_CONTAINER, "image": container["image"], "imagePullPolicy": "Always", **TERMINATION_MESSAGE,
            "args": ["download"], "env": container["env"], "resources": resources,
            "securityContext": dict(container["securityContext"]), "volumeMounts": mounts}


SOCKET_VOLUME = "weight-cache"
HEALTH_PORT_NAME = "weights"


def add_weight_cache(launch, pod: dict) -> dict:
    """KIMI_PRELOAD: `vllm preload` as a native sidecar of the engine's pod (an init container that
    keeps running, Kubernetes 1.29+): it starts before the engine, which waits for its startup
    probe (every daemon holds its shard), survives the engine container's restarts (a crash, a
    failed liveness probe) and is stopped after it. It shares the pod's IPC namespace, /dev/shm,
    the cache and a memory-backed volume for the daemons' sockets; it sees the pod's GPUs the way
    the brand's data says (recipes/hardware.yaml k8s_sidecar_gpus_env), or the rendering is refused."""
    found = weight_cache(launch)
    if found is None:
        return pod
    proc, data = found
    gpus_env, hw = brand(launch).k8s_sidecar_gpus_env, hardware(launch)
    if not gpus_env:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_PRELOAD=1 on Kubernetes: a second container of the pod "
                        f"cannot see {brand(launch).name} GPUs (their device plugin gives each GPU to one "
                        "container; recipes/hardware.yaml has no k8s_sidecar_gpus_env for the brand). Render "
                        "Compose instead (kimi-serve plan --format compose), or unset KIMI_PRELOAD.")
    if proc.local_gpus != hw.gpu_count:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_PRELOAD=1 on Kubernetes: the sidecar sees every GPU of the "
                        f"node ({hw.gpu_count}), but the engine takes {proc.local_gpus}, so their GPUs could differ. "
                        "Use a strategy whose engine takes the whole node (KIMI_STRATEGY, `kimi-serve list`), "
                        "render Compose, or unset KIMI_PRELOAD.")
    release = data.releases[launch.selection.vllm_version]
    socket_mount = {"name": SOCKET_VOLUME, "mountPath": data.socket_volume}
    engine = pod["containers"][0]
    engine["volumeMounts"].append(dict(socket_mount))
    pod["volumes"].append({"name": SOCKET_VOLUME, "emptyDir": {"medium": "Memory"}})
    amounts = {"cpu": str(data.resources.cpu), "memory": f"{data.resources.memory_gib}Gi"}
    h = health(launch)
    get = {"httpGet": {"path": release.health_path, "port": HEALTH_PORT_NAME}, "timeoutSeconds": h.timeout_s,
           "periodSeconds": h.interval_s}
    env = [*k8s_env(launch, proc), *env_list(gpus_env)]
    pod["initContainers"].append({
        "name": proc.role, "image": image(launch), "imagePullPolicy": "Always", **TERMINATION_MESSAGE,
        "restartPolicy": "Always",
        "env": env, "resources": {"limits": amounts, "requests": dict(amounts)},
        "securityContext": container_security(launch),
        "volumeMounts": [dict(m) for m in engine["volumeMounts"]],
        "ports": [{"name": HEALTH_PORT_NAME, "containerPort": proc.port}],
        "startupProbe": {**get, "failureThreshold": -(-startup_bound(launch) // h.interval_s)},
        # no preStop: the kubelet stops a native sidecar only once the engine beside it has exited
        "livenessProbe": {**get, "failureThreshold": h.retries}})
    return pod
