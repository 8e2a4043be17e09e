"""`kimi-serve plan --format k8s`: Kubernetes manifests for every deployment shape.

- single node: a PersistentVolumeClaim for the cache, a Deployment (Recreate: the GPUs cannot
  hold two copies) and the Service `<name>-api`;
- multi-node (`multi_node_*`): a LeaderWorkerSet `<name>` of KIMI_NODES pods; rank and head come
  from the LWS_* variables LWS injects (the runtime maps them), so every pod runs the same
  template; the group is recreated when one pod fails; Service `<name>-api`;
- pd_cluster: one LeaderWorkerSet per pool (`<name>-prefill`, `<name>-decode`), a router
  Deployment and the Service `<name>-api` in front of the router. The pools' node addresses are
  the pods' stable DNS names, `<lws>-0.<lws>` (leader) and `<lws>-0-<i>.<lws>` (worker i) through
  the headless Service LWS creates for each set, given to every pod as KIMI_*_ADDRS (a PD fleet's
  groups each their own: render/k8s_fleet.py).

Each LWS pod gets its own cache claim (volumeClaimTemplates), so any storage class will do.

Every object lives in KIMI_NAMESPACE, rendered first as a Namespace that enforces the Pod Security
Standards' `restricted` profile. NetworkPolicies admit the API port from anywhere to the pods
that serve it, and any port between the deployment's own pods (NCCL, Gloo and NIXL open
ephemeral ports besides the rendezvous, KV and DP-RPC ports, so a port list would hang them);
nothing else reaches a pod. docs/security.md lists every control and every skip.
"""

from __future__ import annotations

from typing import List, Mapping, NamedTuple

import re
import sys

from entrypoint.core.errors import INVALID_VALUE, UNSUPPORTED_COMBINATION, KimiError
from entrypoint.core.plan import Port, Process
from entrypoint.render import autoscaling, k8s_fleet, k8s_kv, monitoring
from entrypoint.render.monitoring import engine_components
from entrypoint.render.deployment import (KV_STORE, MULTI_NODE, PD_CLUSTER, SINGLE, service_name, shape,
                                          with_defaults)
from entrypoint.render.k8s_pod import CACHE_VOLUME, add_weight_cache, hf_token_secret, pod_spec, skip_annotations
from entrypoint.render.yamltext import dump_all

FILE = "kubernetes.yaml"
CACHE_SIZE = "1Ti"  # the INT4 checkpoint is ~600 GB; room for a second variant or an update
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
AUTO_IFACE = {"KIMI_IFACE": "auto"}  # each pod finds its own interface
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


def deployment_environ(environ: Mapping[str, str], settings, sel) -> dict:
    """The rendering environment: the addresses the deployment gives its own pods."""
    kv = k8s_kv.deployment_environ(environ, settings, sel)  # a KV store's Services and pod names
    kv.update(k8s_fleet.deployment_environ(environ, settings, sel, (LWS_NAME_LABEL, LWS_INDEX_LABEL)))  # a fleet
    if sel.prefill is not None:
        addrs = {f"KIMI_{p.role.upper()}_ADDRS": ",".join(pod_addresses(lws_name(sel.name, p.role), p.node_count))
                 for p in (sel.prefill, sel.decode)}
        return with_defaults(environ, {**addrs, **AUTO_IFACE, **kv})
    if sel.is_multi_node:
        head = pod_addresses(lws_name(sel.name), sel.nodes)[0]
        return with_defaults(environ, {"KIMI_HEAD_ADDR": head, **AUTO_IFACE, **kv})
    return with_defaults(environ, kv)


def _own(launch) -> dict:
    """The labels every pod of the deployment carries."""
    return {"app.kubernetes.io/name": launch.name, "app.kubernetes.io/part-of": "kimi-serve"}


def _labels(launch, component: str) -> dict:
    return {**_own(launch), "app.kubernetes.io/component": component}


def _meta(launch, name: str, component: str, annotations=None) -> dict:
    meta = {"name": name, "namespace": launch.settings.namespace, "labels": _labels(launch, component)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def _template_meta(launch, proc: Process) -> dict:
    meta = {"labels": _labels(launch, proc.role)}
    skips = skip_annotations(launch, proc)
    if skips:
        meta["annotations"] = skips  # the pods carry their skips, for scanners of live objects too
    return meta


def _cache_claim_spec(access: str = "ReadWriteOnce") -> dict:
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


def _deployment(launch, proc: Process, cache_claim=None) -> dict:
    labels = _labels(launch, proc.role)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": _meta(launch, service_name(launch, proc), proc.role, skip_annotations(launch, proc)),
            "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": labels},
                     "template": {"metadata": _template_meta(launch, proc),
                                  "spec": pod_spec(launch, proc, cache_claim)}}}


def _lws(launch, name: str, group: List[Process]) -> dict:
    def template(proc: Process) -> dict:
        return {"metadata": _template_meta(launch, proc), "spec": pod_spec(launch, proc, None)}

    spec = {"size": len(group), "restartPolicy": "RecreateGroupOnPodRestart"}
    if len(group) > 1:
        spec["leaderTemplate"] = template(group[0])
    spec["workerTemplate"] = template(group[-1])
    spec["volumeClaimTemplates"] = [{"metadata": {"name": CACHE_VOLUME}, "spec": _cache_claim_spec()}]
    return {"apiVersion": LWS_API, "kind": "LeaderWorkerSet",
            "metadata": _meta(launch, name, group[0].role),
            "spec": {"replicas": 1, "startupPolicy": "LeaderCreated", "networkConfig": {"subdomainPolicy": "Shared"},
                     "leaderWorkerTemplate": spec}}


def _service(launch, selector: dict, port: int) -> dict:
    name = f"{launch.name}-api"
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(launch, name, "api"),
            "spec": {"selector": selector, "ports": [{"name": "http", "port": port, "targetPort": "http"}]}}


def _namespace(launch) -> dict:
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
    """The ports the engines serve /metrics on (each engine's metrics port, by purpose)."""
    return sorted({p.ports[Port.METRICS] for p in launch.plan.engines if Port.METRICS in p.ports})


def _network_policies(launch, api_selector: dict, port: int) -> list:
    """The API port from anywhere to the pods that serve it; any port between the deployment's
    pods; the metrics ports from the scraper to every engine pod that serves them (a PD pool's
    :8001/:8002, a KV store's instances: not the API pods)."""
    name, own = launch.name, _own(launch)
    api = {"podSelector": {"matchLabels": api_selector}, "policyTypes": ["Ingress"],
           "ingress": [{"ports": [{"protocol": "TCP", "port": port}]}]}
    internal = {"podSelector": {"matchLabels": own}, "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": own}}]}]}
    metrics = {"podSelector": {"matchLabels": own, "matchExpressions": [
                   {"key": "app.kubernetes.io/component", "operator": "In", "values": engine_components(launch)}]},
               "policyTypes": ["Ingress"],
               "ingress": [{"from": [scraper(launch)],
                            "ports": [{"protocol": "TCP", "port": p} for p in metrics_ports(launch)]}]}
    return [{"apiVersion": NETPOL_API, "kind": "NetworkPolicy", "metadata": _meta(launch, f"{name}-{suffix}", suffix),
             "spec": spec} for suffix, spec in (("api", api), ("internal", internal), ("metrics", metrics))]


class Drawn(NamedTuple):
    """A shape's own objects and the pods its API Service selects, on which port (exposed once, by
    `_exposed`: a fleet draws a copy and exposes the fleet's front instead)."""

    objects: list
    selector: dict
    port: int


def _exposed(launch, objects: list, selector: dict, port: int) -> list:
    """The namespace, the objects, the API Service and the NetworkPolicies."""
    return [_namespace(launch), *objects, _service(launch, selector, port),
            *_network_policies(launch, selector, port)]


def _single(launch) -> list:
    proc = launch.plan.processes[0]
    claim = f"{launch.name}-cache"
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _meta(launch, claim, "cache"),
           "spec": _cache_claim_spec(cache_access(launch))}
    deployment = _deployment(launch, proc, claim)
    k8s_kv.add_companions(launch, deployment["spec"]["template"]["spec"])  # LMCache's server beside the engine
    add_weight_cache(launch, deployment["spec"]["template"]["spec"])  # KIMI_PRELOAD's `vllm preload` beside it
    return Drawn([pvc, deployment], _labels(launch, proc.role), proc.port)


def _multi_node(launch) -> list:
    procs = list(launch.plan.processes)
    name = lws_name(launch.name)
    selector = {LWS_NAME_LABEL: name}
    if not all(p.serves_http for p in procs):
        selector[LWS_INDEX_LABEL] = "0"  # only the head serves the API
    return Drawn([_lws(launch, name, procs)], selector, procs[0].port)


def pd_pools(launch) -> list:
    """A PD cluster's pools: a LeaderWorkerSet each."""
    pools = (launch.selection.prefill, launch.selection.decode)
    if any(pool.nodes == 0 for pool in pools):
        raise KimiError(UNSUPPORTED_COMBINATION, "A pool of 0 nodes shares one node's GPUs with the other pool, which "
                        "Kubernetes cannot give to two pods. Set KIMI_PREFILL_NODES and KIMI_DECODE_NODES to 1 or "
                        "more, or render the shared node for Compose: kimi-serve plan --format compose.")
    objects = []
    for pool in pools:
        group = sorted((p for p in launch.plan.processes if p.role == pool.role), key=lambda p: p.rank)
        objects.append(_lws(launch, lws_name(launch.name, pool.role), group))
    return objects


def _pd_cluster(launch) -> Drawn:
    router = launch.plan.front
    return Drawn(pd_pools(launch) + [_deployment(launch, router)], _labels(launch, "router"), router.port)


def _kv_store(launch) -> Drawn:
    import sys

    return k8s_kv.kv_store(sys.modules[__name__], launch)


_SHAPES = {SINGLE: _single, MULTI_NODE: _multi_node, PD_CLUSTER: _pd_cluster, KV_STORE: _kv_store}


def render(launch) -> dict:
    plan = launch.plan
    header = (f"# {plan.headline(launch.catalog.recipe.title)}.\n"
              "# Rendered by `kimi-serve plan --format k8s`; apply with `kubectl apply -f`. The Hugging Face token\n"
              f"# comes from the optional Secret {hf_token_secret(launch)} (key HF_TOKEN), mounted as a file:\n"
              f"#   kubectl -n {launch.settings.namespace} create secret generic {hf_token_secret(launch)} "
              "--from-literal=HF_TOKEN=hf_...\n"
              "# Hardened to Pod Security `restricted`; docs/security.md lists the controls and the skips.\n")
    draw = _SHAPES[shape(launch)]
    if launch.fleet is not None and shape(launch) in (SINGLE, MULTI_NODE):  # copies behind a router: k8s_fleet.py
        objects = k8s_fleet.fleet(sys.modules[__name__], launch, draw)
    elif launch.fleet is not None and shape(launch) == PD_CLUSTER:  # PD units behind the discovering PD router
        objects = k8s_fleet.pd_fleet(sys.modules[__name__], launch)
    else:
        objects = _exposed(launch, *draw(launch))
    objects = autoscaling.apply(launch, objects) + monitoring.objects(launch) \
        + k8s_fleet.monitoring_objects(sys.modules[__name__], launch)
    return {FILE: header + dump_all(objects)}
