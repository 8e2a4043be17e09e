"""The Kubernetes objects every Kubernetes rendering builds from (render/k8s.py, k8s_kv.py,
k8s_fleet.py, gateway.py, fleet.py): the deployment's labels and metadata, a process's Deployment
or a LeaderWorkerSet of a group of processes, the cache claim, the API Service, the Namespace and
the NetworkPolicies, a PD cluster's pools, and `exposed`, which puts a shape's objects behind the
API Service. Public builders, imported by name; the pod of one process is render/k8s_pod.py's.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple

from entrypoint.core.base.errors import INVALID_VALUE, UNSUPPORTED_COMBINATION, KimiError
from entrypoint.core.compose.plan import Port, Process
from entrypoint.render.deployment import service_name
from entrypoint.render.k8s_pod import (CACHE_VOLUME, SETTINGS_CHECKSUM, SKIP_ANNOTATION, pod_spec, settings_checksum,
                                       skip_annotations)
from entrypoint.render.monitoring import engine_components

CACHE_SIZE = "1Ti"  # the INT4 checkpoint is ~600 GB; room for a second variant or an update
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
NETPOL_API = "networking.k8s.io/v1"
PSS_LEVEL = "restricted"  # the Pod Security Standards profile the namespace enforces
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
NAMESPACE_LABEL = "kubernetes.io/metadata.name"  # every namespace carries its own name (Kubernetes >= 1.22)
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def lws_name(name: str, role: str = "") -> str:
    return f"{name}-{role}" if role else name


def pod_addresses(lws: str, size: int, group: str = "0") -> List[str]:
    """Stable DNS names of the pods of one group (0 unless named) of a LeaderWorkerSet (Shared
    subdomain policy): the leader `<set>-<group>`, worker i `<set>-<group>-<i>`."""
    return [f"{lws}-{group}.{lws}"] + [f"{lws}-{group}-{i}.{lws}" for i in range(1, size)]


def own_labels(launch) -> dict:
    """The labels every pod of the deployment carries."""
    return {"app.kubernetes.io/name": launch.name, "app.kubernetes.io/part-of": "kimi-serve"}


def component_labels(launch, component: str) -> dict:
    return {**own_labels(launch), "app.kubernetes.io/component": component}


def meta(launch, name: str, component: str, annotations=None) -> dict:
    meta = {"name": name, "namespace": launch.settings.namespace, "labels": component_labels(launch, component)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def with_skips(annotations: dict, skips=()) -> dict:
    """`annotations` (checkov skip annotations) with one more for each `CKV_ID=reason` of `skips`,
    numbered after them (docs/security.md lists each)."""
    out = dict(annotations)
    for skip in skips:
        out[SKIP_ANNOTATION.format(len(out) + 1)] = skip
    return out


def template_meta(launch, proc: Process, skips=()) -> dict:
    """A pod template's labels and annotations: its skips (the process's own, then `skips`; the pods
    carry them for scanners of live objects too) and the checksum of the settings its containers read."""
    annotations = with_skips(skip_annotations(launch, proc), skips)
    annotations[SETTINGS_CHECKSUM] = settings_checksum(launch)
    return {"labels": component_labels(launch, proc.role), "annotations": annotations}


def cache_claim_spec(access: str = "ReadWriteOnce") -> dict:
    return {"accessModes": [access], "resources": {"requests": {"storage": CACHE_SIZE}}}


def shared_claim(launch) -> bool:
    """Whether the rendering can run two pods of one Deployment's cache claim at once (copies,
    an autoscaler, a surge rollout): a ReadWriteOnce claim then never attaches to the second pod
    on another node, so the claim is ReadWriteMany (a class that shares: NFS, CephFS, EFS,
    Filestore...)."""
    values = launch.settings.values
    return values["replicas"] > 1 or values["autoscaling"] != "off"


def cache_access(launch) -> str:
    return "ReadWriteMany" if shared_claim(launch) else "ReadWriteOnce"


RECREATE = {"type": "Recreate"}  # the GPUs cannot hold two copies


def deployment(launch, proc: Process, cache_claim=None, pod=None, strategy=None, skips=()) -> dict:
    """The Deployment of one process: its pod (`pod`, else the process's pod_spec with `cache_claim`),
    replaced by `strategy` (else Recreate), with the process's skip annotations and `skips`."""
    labels = component_labels(launch, proc.role)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": meta(launch, service_name(launch, proc), proc.role,
                             with_skips(skip_annotations(launch, proc), skips)),
            "spec": {"replicas": 1, "strategy": dict(strategy or RECREATE), "selector": {"matchLabels": labels},
                     "template": {"metadata": template_meta(launch, proc, skips),
                                  "spec": pod if pod is not None else pod_spec(launch, proc, cache_claim)}}}


def leader_worker_set(launch, name: str, group: List[Process]) -> dict:
    def template(proc: Process) -> dict:
        return {"metadata": template_meta(launch, proc), "spec": pod_spec(launch, proc, None)}

    spec = {"size": len(group), "restartPolicy": "RecreateGroupOnPodRestart"}
    if len(group) > 1:
        spec["leaderTemplate"] = template(group[0])
    spec["workerTemplate"] = template(group[-1])
    spec["volumeClaimTemplates"] = [{"metadata": {"name": CACHE_VOLUME}, "spec": cache_claim_spec()}]
    return {"apiVersion": LWS_API, "kind": "LeaderWorkerSet",
            "metadata": meta(launch, name, group[0].role),
            "spec": {"replicas": 1, "startupPolicy": "LeaderCreated", "networkConfig": {"subdomainPolicy": "Shared"},
                     "leaderWorkerTemplate": spec}}


def api_service(launch, selector: dict, port: int) -> dict:
    name = f"{launch.name}-api"
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(launch, name, "api"),
            "spec": {"selector": selector, "ports": [{"name": "http", "port": port, "targetPort": "http"}]}}


def namespace(launch) -> dict:
    ns = launch.settings.namespace
    if not _DNS_LABEL.match(ns):
        raise KimiError(INVALID_VALUE, f"KIMI_NAMESPACE={ns!r} is not a Kubernetes namespace name: up to 63 "
                        "lower-case letters, digits and '-', starting and ending with a letter or digit.")
    labels = {"app.kubernetes.io/part-of": "kimi-serve"}
    labels.update({f"pod-security.kubernetes.io/{mode}": PSS_LEVEL for mode in ("enforce", "audit", "warn")})
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}


def scraper(launch) -> dict:
    """The `from` peer of the Prometheus that scrapes the engines: its namespace
    (KIMI_SCRAPER_NAMESPACE) and, when KIMI_SCRAPER_LABELS names them, its pods' labels."""
    peer = {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: launch.settings.scraper_namespace}}}
    labels = {}
    for item in launch.settings.scraper_labels:
        key, sep, value = item.partition("=")
        if not sep or not _LABEL_KEY.match(key.strip()) or not _LABEL_VALUE.match(value.strip()):
            raise KimiError(INVALID_VALUE, f"KIMI_SCRAPER_LABELS entry {item!r} is not a Kubernetes label `key=value` "
                            "(e.g. app.kubernetes.io/name=prometheus). Fix it, or unset KIMI_SCRAPER_LABELS to admit "
                            "every pod of KIMI_SCRAPER_NAMESPACE.")
        labels[key.strip()] = value.strip()
    if labels:
        peer["podSelector"] = {"matchLabels": labels}
    return peer


def metrics_ports(launch) -> list:
    """The ports the engines serve /metrics on (each engine's metrics port, by purpose), in the plan's
    order of the engines (the chart draws them in the order of its groups: no sorting in Go)."""
    return list(dict.fromkeys(p.ports[Port.METRICS] for p in launch.plan.engines if Port.METRICS in p.ports))


def network_policies(launch, api_selector: dict, port: int) -> list:
    """The API port from anywhere to the pods that serve it; any port between the deployment's
    pods; the metrics ports from the scraper to every engine pod that serves them (a PD pool's
    :8001/:8002, a KV store's instances: not the API pods)."""
    name, own = launch.name, own_labels(launch)
    api = {"podSelector": {"matchLabels": api_selector}, "policyTypes": ["Ingress"],
           "ingress": [{"ports": [{"protocol": "TCP", "port": port}]}]}
    internal = {"podSelector": {"matchLabels": own}, "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": own}}]}]}
    metrics = {"podSelector": {"matchLabels": own, "matchExpressions": [
                   {"key": "app.kubernetes.io/component", "operator": "In", "values": engine_components(launch)}]},
               "policyTypes": ["Ingress"],
               "ingress": [{"from": [scraper(launch)],
                            "ports": [{"protocol": "TCP", "port": p} for p in metrics_ports(launch)]}]}
    return [{"apiVersion": NETPOL_API, "kind": "NetworkPolicy", "metadata": meta(launch, f"{name}-{suffix}", suffix),
             "spec": spec} for suffix, spec in (("api", api), ("internal", internal), ("metrics", metrics))]


class Drawn(NamedTuple):
    """A shape's own objects and the pods its API Service selects, on which port (exposed once, by
    `exposed`: a fleet draws a copy and exposes the fleet's front instead)."""

    objects: list
    selector: dict
    port: int


def exposed(launch, objects: list, selector: dict, port: int) -> list:
    """The namespace, the objects, the API Service and the NetworkPolicies."""
    return [namespace(launch), *objects, api_service(launch, selector, port),
            *network_policies(launch, selector, port)]


def pd_pools(launch) -> list:
    """A PD cluster's pools: a LeaderWorkerSet each."""
    pools = launch.plan.topology.pools
    if any(pool.shares_node for pool in pools):
        raise KimiError(UNSUPPORTED_COMBINATION, "A pool of 0 nodes shares one node's GPUs with the other pool, which "
                        "Kubernetes cannot give to two pods. Set KIMI_PREFILL_NODES and KIMI_DECODE_NODES to 1 or "
                        "more, or render the shared node for Compose: kimi-serve plan --format compose.")
    return [leader_worker_set(launch, lws_name(launch.name, pool.name), list(pool.groups[0].nodes)) for pool in pools]


def pd_cluster(launch) -> Drawn:
    router = launch.plan.topology.router
    return Drawn(pd_pools(launch) + [deployment(launch, router)], component_labels(launch, router.role), router.port)

