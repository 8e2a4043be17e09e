"""Kubernetes objects of a fleet (KIMI_REPLICAS > 1 behind a router; core/compose/fleet.py, docs/fleet.md), for
`render/k8s.py`.

- The copies: the single-node Deployment, or the multi-node LeaderWorkerSet, with KIMI_REPLICAS
  copies (whole groups), as k8s.py draws one copy (render/autoscaling.py sets the copies and the
  autoscaler, whose triggers sum the queue over every copy of the deployment);
- the router (KIMI_ROUTER=vllm-router): a Deployment `<name>-router` running the KV store's
  cache-aware vllm-router with `--service-discovery`: it lists and watches the pods that serve the
  copies' API (the single-node pods; each group's leader), in its own namespace, and checks their
  health itself; its ServiceAccount, a Role (pods get/list/watch: recipes/fleet.yaml) and the
  RoleBinding; the Service `<name>-api` in front of it; with KIMI_MONITORING=1 a PodMonitor of its
  own metrics port and a NetworkPolicy admitting the scraper to that port;
- a PD fleet (`pd_fleet`): each pool's LeaderWorkerSet with KIMI_REPLICAS groups (one per unit),
  each group's pods naming their own group's pool pods (`LWS_GROUP_INDEX`, LWS's group-index label
  through the downward API; KIMI_PEER_NAMES=k8s), and the PD router, with the same RBAC, discovering every group's prefill and
  decode API pods by a selector per pool (KIMI_ROUTER_SELECTOR's `prefill:` / `decode:` terms);
- or KIMI_ROUTER=gateway: render/gateway.py (an InferencePool and its endpoint picker).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from entrypoint.core.base.errors import UNSUPPORTED_COMBINATION, KimiError
from entrypoint.core.compose.fleet import choose, load_fleet
from entrypoint.core.compose.plan import Port
from entrypoint.render import gateway
from entrypoint.render.fleet import GROUP_INDEX_LABEL, check_selector, rbac, selector
from entrypoint.render.k8s_objects import (LWS_INDEX_LABEL, LWS_NAME_LABEL, NETPOL_API, component_labels, deployment,
                                           exposed, meta, pd_pools, scraper)
from entrypoint.render.k8s_pod import env_list, pod_spec
from entrypoint.render.monitoring import MONITORING_API

METRICS_PORT_NAME = "metrics"


def _choice(settings, sel):
    return choose(settings, pd=sel.prefill is not None)


def deployment_environ(environ: Mapping[str, str], settings, sel, lws_labels) -> dict:
    """The router's discovery of the copies (the selector), or a refusal where Kubernetes cannot."""
    choice = _choice(settings, sel)
    if choice is None:
        return {}
    if choice.addrs:
        raise KimiError(UNSUPPORTED_COMBINATION, "KIMI_REPLICA_ADDRS names hosts, but on Kubernetes the router "
                        "discovers the copies' pods itself (--service-discovery). Unset KIMI_REPLICA_ADDRS.")
    if choice.front != "vllm-router":
        return {}
    return {"KIMI_ROUTER_SELECTOR": ",".join(selector(sel.name, sel, lws_labels))}


def _rbac(launch) -> list:
    return rbac(launch, f"{launch.name}-router", "router", [load_fleet().discovery.rbac])


TOKEN_SKIP = ("CKV_K8S_38=the fleet's router discovers the copies' pods (--service-discovery lists and watches them) "
              "with its ServiceAccount's token; its Role grants get, list and watch of pods in its namespace only")


ROLLING = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def _router_deployment(launch, router) -> dict:
    """The router's Deployment: rolled one at a time, its ServiceAccount's token mounted (it lists and
    watches the copies' pods: its Role), and what the router's own plan needs that no other container
    gets: where to discover, how many copies, and its Prometheus port."""
    pod = pod_spec(launch, router, None)
    own = {"KIMI_NAMESPACE": launch.settings.namespace, "KIMI_REPLICAS": str(launch.fleet.replicas)}
    if launch.plan.topology.multi_node:  # the copy's plan resolves with group 0's head (the router runs none of it)
        own["KIMI_HEAD_ADDR"] = launch.settings.head_addr
    container, *others = pod["containers"]
    container = {**container, "env": [*env_list(own), *container["env"]],
                 "ports": [*container["ports"], {"name": METRICS_PORT_NAME,
                                                 "containerPort": router.ports[Port.METRICS]}]}
    pod = {**pod, "automountServiceAccountToken": True, "containers": [container, *others],
           "serviceAccountName": f"{launch.name}-router"}
    return deployment(launch, router, pod=pod, strategy=ROLLING, skips=[TOKEN_SKIP])


def _engine_launch(launch):
    """The launch of one copy (the router left out), which k8s.py draws as it always has."""
    return dataclasses.replace(launch, plan=launch.plan.without_router())


GROUP_VAR = "LWS_GROUP_INDEX"  # that label, read into each pool pod by the downward API
GROUP_FIELD = f"metadata.labels['{GROUP_INDEX_LABEL}']"  # the downward API's path to it


def _own_group(lws: dict) -> dict:
    """Each group of a pool's LeaderWorkerSet names its own pool pods: every container gets the group's
    index from the pod's own label (the downward API), first, and takes `<set>-<index>.<set>,...` as
    its pool addresses (render/k8s.py peer_addresses, KIMI_PEER_NAMES=k8s), so each group's head,
    DP address and NIXL side channels are its own pods'. A value set by hand stays as given."""
    index = {"name": GROUP_VAR, "valueFrom": {"fieldRef": {"fieldPath": GROUP_FIELD}}}

    def pod(template: dict) -> dict:  # the download step too: it resolves the same plan
        found = template["spec"]
        return {**template, "spec": {**found, **{key: [{**c, "env": [index, *c["env"]]} for c in found[key]]
                                                  for key in ("containers", "initContainers") if key in found}}}

    spec = lws["spec"]["leaderWorkerTemplate"]
    templates = {key: pod(spec[key]) for key in ("leaderTemplate", "workerTemplate") if key in spec}
    return {**lws, "spec": {**lws["spec"], "leaderWorkerTemplate": {**spec, **templates}}}


def _behind_router(launch, copies: list) -> list:
    """The copies' objects, the router's RBAC and Deployment, exposed through the router's API port."""
    router = launch.plan.topology.router
    check_selector(launch, copies, (LWS_NAME_LABEL, LWS_INDEX_LABEL))  # it discovers some copy
    return exposed(launch, copies + _rbac(launch) + [_router_deployment(launch, router)],
                   component_labels(launch, router.role), router.port)


def pd_fleet(launch) -> list:
    """A PD fleet: each pool's LeaderWorkerSet with a group per unit (each group its own addresses),
    and the PD router discovering every group's prefill and decode pods, with its RBAC."""
    return _behind_router(launch, [_own_group(lws) for lws in pd_pools(launch)])


def fleet(launch, draw_one) -> list:
    """The copies (draw_one: k8s.py's drawing of one copy) and what fronts them."""
    one = draw_one(_engine_launch(launch)).objects
    if launch.fleet.front == "gateway":
        return exposed(launch, one, gateway.pool_selector(launch), gateway.api_port(launch)) \
            + gateway.objects(launch)
    return _behind_router(launch, one)


def monitoring_objects(launch) -> list:
    """The router's own metrics: a PodMonitor and the NetworkPolicy that admits its metrics port to
    the scraper only (KIMI_SCRAPER_NAMESPACE / KIMI_SCRAPER_LABELS, as the engines' metrics ports)."""
    if launch.fleet is None or launch.fleet.front != "vllm-router" or not launch.settings.values["monitoring"]:
        return []
    metrics, name = load_fleet().metrics, launch.name
    labels = component_labels(launch, "router")
    pod_monitor = {"apiVersion": MONITORING_API, "kind": "PodMonitor",
                   "metadata": meta(launch, f"{name}-router", "monitoring"),
                   "spec": {"selector": {"matchLabels": labels},
                            "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": metrics.path}]}}
    policy = {"apiVersion": NETPOL_API, "kind": "NetworkPolicy",
              "metadata": meta(launch, f"{name}-router-metrics", "router"),
              "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"],
                       "ingress": [{"from": [scraper(launch)], "ports": [{"protocol": "TCP", "port": metrics.port}]}]}}
    return [pod_monitor, policy]
