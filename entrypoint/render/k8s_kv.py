"""Kubernetes objects of a KV deployment (KIMI_KV_OFFLOAD, docs/kv-cache.md), for `render/k8s.py`.

- A Mooncake KV store: the master as a Deployment behind the Service `<name>-master` (its RPC
  port); the store (centralized) as a StatefulSet of one pod with a headless Service, so it
  advertises its own pod name `<name>-store-0.<name>-store` (the transfer engine connects to
  ports it opens at start, which no ClusterIP forwards); the instances as a StatefulSet of
  KIMI_KV_INSTANCES pods with stable names `<name>-instance-<i>.<name>-instance` (each pod's rank
  is its `apps.kubernetes.io/pod-index` label), each with its own cache claim; the cache-aware
  router as a Deployment behind `<name>-api`. With pd_cluster: the PD objects plus master (+ store).
- LMCache: its server as a second container of the engine's pod (KIMI_ROLE=lmcache), bound to the
  pod (the engine reaches it on localhost), sharing the pod's /dev/shm.

The NetworkPolicies are render/k8s_objects.py's: the API port from anywhere to the router, any port between the
deployment's own pods (master RPC, the store, the transfer engine's ports), nothing else.
"""

from __future__ import annotations

from typing import List

from entrypoint.core.base.errors import UNSUPPORTED_COMBINATION, KimiError
from entrypoint.core.compose.kv import choose
from entrypoint.core.compose.plan import INSTANCE, Kind, Process
from entrypoint.render.deployment import (SHM, TERMINATION_MESSAGE, helper_resources, image, is_companion,
                                          scratch, stop)
from entrypoint.render.k8s_objects import (Drawn, cache_claim_spec, component_labels, deployment, meta, pd_cluster,
                                           template_meta)
from entrypoint.render.k8s_pod import (CACHE_VOLUME, SHM_VOLUME, container_security, helper_probes, k8s_env, pod_spec,
                                       pre_stop, skip_annotations)

POD_INDEX = "metadata.labels['apps.kubernetes.io/pod-index']"  # Kubernetes >= 1.28 labels StatefulSet pods


def addresses(name: str) -> dict:
    """The names a KV store's pods reach each other by, as the settings that carry them."""
    return {"master": f"{name}-master", "store": f"{name}-store-0.{name}-store",
            "instance": lambda i: f"{name}-instance-{i}.{name}-instance"}


def peer_addresses(settings, sel) -> dict:
    """A KV store's addresses: the Services and pod names rendered here (render/k8s.py peer_addresses)."""
    choice = choose(settings)
    if choice is None or not choice.store:
        return {}
    if sel.is_multi_node:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_KV_OFFLOAD={choice.id} with a multi-node strategy "
                        f"({sel.strategy}) gives every instance its own group of nodes, which the Kubernetes "
                        "rendering does not draw yet (a LeaderWorkerSet per instance). Render single-node "
                        "instances (KIMI_STRATEGY=single_node_*), or run the plan's processes yourself "
                        "(`kimi-serve plan`).")
    where = addresses(sel.name)
    out = {"KIMI_MOONCAKE_MASTER_ADDR": where["master"], "KIMI_MOONCAKE_STORE_HOST": where["store"]}
    if sel.prefill is None:
        out["KIMI_INSTANCE_ADDRS"] = ",".join(where["instance"](i) for i in range(choice.instances))
    return out


def _headless(launch, name: str, component: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(launch, name, component),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": component_labels(launch, component)}}


def _with_rank(spec: dict) -> dict:
    """Each pod's KIMI_NODE_RANK is its StatefulSet ordinal (the downward API)."""
    rank = {"name": "KIMI_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": POD_INDEX}}}
    ranked = {key: [{**c, "env": [rank, *c["env"]]} for c in spec[key]]
              for key in ("containers", "initContainers") if key in spec}
    return {**spec, **ranked}


def _stateful_set(launch, proc: Process, replicas: int, claims: bool) -> dict:
    name = f"{launch.name}-{proc.role}"
    spec = {"replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": component_labels(launch, proc.role)},
            "template": {"metadata": template_meta(launch, proc), "spec": _with_rank(pod_spec(launch, proc, None))}}
    if claims:
        spec["volumeClaimTemplates"] = [{"metadata": {"name": CACHE_VOLUME}, "spec": cache_claim_spec()}]
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": meta(launch, name, proc.role, skip_annotations(launch, proc)), "spec": spec}


def _master_service(launch, master: Process) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(launch, f"{launch.name}-master",
                                                                         "master"),
            "spec": {"selector": component_labels(launch, "master"),
                     "ports": [{"name": "tcp", "port": master.port, "targetPort": "tcp"}]}}


def kv_store(launch) -> Drawn:
    """The KV store's objects: its master, store and instances, or its PD pools."""
    topology = launch.plan.topology
    master, store = topology.helper(Kind.KV_MASTER), topology.helper(Kind.KV_STORE)
    objects: List[dict] = [deployment(launch, master), _master_service(launch, master)]
    if store is not None:
        objects += [_stateful_set(launch, store, 1, claims=False),
                    _headless(launch, f"{launch.name}-{store.role}", store.role)]
    if topology.pd:  # PD pools + their router, as k8s_objects.py draws them
        pd = pd_cluster(launch)
        return Drawn(objects + pd.objects, pd.selector, pd.port)
    instances = topology.pool(INSTANCE).engines
    objects += [_stateful_set(launch, instances[0], len(instances), claims=True),
                _headless(launch, f"{launch.name}-{INSTANCE}", INSTANCE)]
    router = topology.router
    if router is None:  # one instance serves the API itself
        return Drawn(objects, component_labels(launch, INSTANCE), instances[0].port)
    return Drawn(objects + [deployment(launch, router)], component_labels(launch, router.role), router.port)


def add_companions(launch, pod: dict) -> dict:
    """The engine's pod with each companion (LMCache's server) as a second container (a new pod)."""

    def container(proc: Process) -> dict:
        sized = helper_resources(launch, proc)
        amounts = {"cpu": str(sized.cpu), "memory": f"{sized.memory_gib}Gi"}
        mounts = [{"name": n, "mountPath": path} for n, path in scratch(launch).items()]
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM})  # the engine hands it shared memory
        return {"name": proc.role, "image": image(launch), "imagePullPolicy": "Always", **TERMINATION_MESSAGE,
                "env": k8s_env(launch, proc, token=False),
                "resources": {"limits": amounts, "requests": dict(amounts)},
                "securityContext": container_security(launch), "volumeMounts": mounts, **helper_probes(launch),
                "lifecycle": pre_stop(stop(launch, proc))}  # SIGTERM once the engine beside it has drained

    companions = [container(p) for p in launch.plan.topology.helpers if is_companion(p)]
    return {**pod, "containers": [*pod["containers"], *companions]}
