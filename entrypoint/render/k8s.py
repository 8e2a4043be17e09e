"""`kimi-serve plan --format k8s`: Kubernetes manifests for every deployment shape.

- single node: a PersistentVolumeClaim for the cache, a Deployment (Recreate: the GPUs cannot
  hold two copies) and the Service `<name>-api`;
- multi-node (`multi_node_*`): a LeaderWorkerSet `<name>` of KIMI_NODES pods; rank and head come
  from the LWS_* variables LWS injects (the runtime maps them), so every pod runs the same
  template; the group is recreated when one pod fails; Service `<name>-api`;
- pd_cluster: one LeaderWorkerSet per pool (`<name>-prefill`, `<name>-decode`), a router
  Deployment and the Service `<name>-api` in front of the router. The pools' node addresses are
  the pods' stable DNS names, `<lws>-0.<lws>` (leader) and `<lws>-0-<i>.<lws>` (worker i) through
  the headless Service LWS creates for each set; no pod carries them: every container is given the
  deployment's name (KIMI_NAME, KIMI_PEER_NAMES=k8s) and names its peers at its start as
  `peer_addresses` does here (a PD fleet's groups each their own: render/k8s_fleet.py; a KV
  store's Services and pods too).

Each LWS pod gets its own cache claim (volumeClaimTemplates), so any storage class will do.

Every object lives in KIMI_NAMESPACE, rendered first as a Namespace that enforces the Pod Security
Standards' `restricted` profile. NetworkPolicies admit the API port from anywhere to the pods
that serve it, and any port between the deployment's own pods (NCCL, Gloo and NIXL open
ephemeral ports besides the rendezvous, KV and DP-RPC ports, so a port list would hang them);
nothing else reaches a pod. docs/security.md lists every control and every skip.
"""

from __future__ import annotations

from typing import Mapping

from entrypoint.render import autoscaling, k8s_fleet, k8s_kv, monitoring
from entrypoint.render.deployment import KV_STORE, MULTI_NODE, PD_CLUSTER, SINGLE, shape, with_defaults
# the chart's facts (buildsys/chart.py) read the constants here too
from entrypoint.render.k8s_objects import (CACHE_SIZE, LWS_API, LWS_INDEX_LABEL, LWS_NAME_LABEL,  # noqa: F401
                                           NAMESPACE_LABEL, NETPOL_API, PSS_LEVEL, Drawn, cache_access,
                                           cache_claim_spec, component_labels, deployment, exposed, leader_worker_set,
                                           lws_name, meta, pd_cluster, pod_addresses)
from entrypoint.render.k8s_pod import SETTINGS_KEY, add_weight_cache, hf_token_secret, pod_spec, settings_json, settings_map_name
from entrypoint.render.yamltext import dump_all

FILE = "kubernetes.yaml"
AUTO_IFACE = {"KIMI_IFACE": "auto"}  # each pod finds its own interface


def peer_addresses(settings, sel, group: str = "0") -> dict:
    """The addresses the deployment `sel.name` gives its pods' peers, as the settings that carry them:
    a KV store's Services and pods, and each PD pool's pods of LeaderWorkerSet group `group`. What
    the rendering composes its plan with, and what a container started with KIMI_PEER_NAMES=k8s
    (every container of this rendering and the chart) takes where its settings give none
    (app/launch.py with_peers), so no pod carries them and no template spells them."""
    out = k8s_kv.peer_addresses(settings, sel)  # a KV store's Services and pod names
    if sel.prefill is not None:
        out.update({f"KIMI_{p.name.upper()}_ADDRS": ",".join(pod_addresses(lws_name(sel.name, p.name), p.node_count, group))
                    for p in sel.pd_pools.values()})
    return out


def deployment_environ(environ: Mapping[str, str], settings, sel) -> dict:
    """The rendering environment: the addresses the deployment gives its own pods."""
    peers = peer_addresses(settings, sel)
    peers.update(k8s_fleet.deployment_environ(environ, settings, sel, (LWS_NAME_LABEL, LWS_INDEX_LABEL)))  # a fleet
    if sel.prefill is not None:
        return with_defaults(environ, {**peers, **AUTO_IFACE})
    if sel.is_multi_node:
        head = pod_addresses(lws_name(sel.name), sel.nodes)[0]
        return with_defaults(environ, {"KIMI_HEAD_ADDR": head, **AUTO_IFACE, **peers})
    return with_defaults(environ, peers)


def _single(launch) -> Drawn:
    proc = launch.plan.processes[0]
    claim = f"{launch.name}-cache"
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(launch, claim, "cache"),
           "spec": cache_claim_spec(cache_access(launch))}
    # LMCache's server beside the engine, KIMI_PRELOAD's `vllm preload` beside it
    pod = add_weight_cache(launch, k8s_kv.add_companions(launch, pod_spec(launch, proc, claim)))
    engine = deployment(launch, proc, pod=pod)
    return Drawn([pvc, engine], component_labels(launch, proc.role), proc.port)


def _multi_node(launch) -> Drawn:
    procs = list(launch.plan.processes)
    name = lws_name(launch.name)
    selector = {LWS_NAME_LABEL: name}
    if not all(p.serves_http for p in procs):
        selector[LWS_INDEX_LABEL] = "0"  # only the head serves the API
    return Drawn([leader_worker_set(launch, name, procs)], selector, procs[0].port)


_SHAPES = {SINGLE: _single, MULTI_NODE: _multi_node, PD_CLUSTER: pd_cluster, KV_STORE: k8s_kv.kv_store}


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
        objects = k8s_fleet.fleet(launch, draw)
    elif launch.fleet is not None and shape(launch) == PD_CLUSTER:  # PD units behind the discovering PD router
        objects = k8s_fleet.pd_fleet(launch)
    else:
        objects = exposed(launch, *draw(launch))
    objects = autoscaling.apply(launch, objects) + monitoring.objects(launch) + k8s_fleet.monitoring_objects(launch)
    return {FILE: header + dump_all(_with_settings(launch, objects))}


def _with_settings(launch, objects: list) -> list:
    """The `<name>-settings` ConfigMap (the user's settings as written, every container's
    KIMI_CONFIG_JSON) first, after the Namespace."""
    first = 1 if objects and objects[0]["kind"] == "Namespace" else 0
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(launch, settings_map_name(launch), "settings"),
              "data": {SETTINGS_KEY: settings_json(launch)}}
    return [*objects[:first], config, *objects[first:]]
