"""What a fleet (core/compose/fleet.py, docs/fleet.md) asks of a rendering for hosts (Compose): one node holds
one copy, so the router on this node is given every copy's address (KIMI_REPLICA_ADDRS, this node's
own included, e.g. 127.0.0.1); a Gateway is a Kubernetes rendering. Also what the Kubernetes
renderings of a fleet share (render/k8s_fleet.py, render/gateway.py): the copies' selector and a
ServiceAccount with its Role and RoleBinding (their checkov skips: render/k8s_objects.py with_skips)."""

from __future__ import annotations

from entrypoint.core.base.errors import INVALID_VALUE, MISSING_SETTING, UNSUPPORTED_COMBINATION, KimiError
from entrypoint.core.compose.fleet import choose
from entrypoint.render.k8s_objects import meta

GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"  # LWS labels every pod with its group's index


def check_hosts(settings, sel, fmt: str) -> None:
    choice = choose(settings, pd=sel.prefill is not None)
    if choice is None:
        return
    if choice.front == "gateway":
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_ROUTER=gateway renders an InferencePool for a cluster's "
                        f"Gateway, which a {fmt} file has not. Use KIMI_ROUTER=vllm-router (the router before the "
                        "copies' addresses), or render Kubernetes manifests: kimi-serve plan --format k8s.")
    if choice.selector:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_ROUTER_SELECTOR discovers Kubernetes pods; a {fmt} file's "
                        "router is given the copies' addresses. Unset it and set KIMI_REPLICA_ADDRS.")
    if sel.prefill is None and len(choice.addrs) < choice.replicas:
        raise KimiError(MISSING_SETTING, f"KIMI_REPLICAS={choice.replicas}: a {fmt} file runs one copy on this node "
                        "and the router in front of every copy, so it needs each copy's address: KIMI_REPLICA_ADDRS "
                        f"(a comma list of {choice.replicas}, this node's own included, e.g. 127.0.0.1; run the same "
                        "file on each node, or the copy's own file there).")


def selector(name: str, sel, lws_labels) -> list:
    """The pod labels of the copies' API pods on Kubernetes (KIMI_ROUTER_SELECTOR's default, the
    InferencePool's selector): the single-node pods, each LeaderWorkerSet group's leader, or a PD
    fleet's pools, each its own (`prefill:` / `decode:` terms): every group's pods of the pool's
    LeaderWorkerSet that serve the API (the leader only, unless every node does: DEP)."""
    name_label, index_label = lws_labels
    if sel.prefill is not None:
        out = []
        for pool in sel.pd_pools.values():
            out.append(f"{pool.name}:{name_label}={name}-{pool.name}")
            if pool.serving_nodes < pool.node_count:
                out.append(f"{pool.name}:{index_label}=0")
        return out
    if sel.is_multi_node:
        return [f"{name_label}={name}", f"{index_label}=0"]
    return [f"app.kubernetes.io/name={name}", "app.kubernetes.io/component=single"]


RBAC_API = "rbac.authorization.k8s.io/v1"


def rbac(launch, name: str, component: str, rules) -> list:
    """The ServiceAccount `name` (its token not mounted unless the pod asks), a Role granting
    `rules` (records with api_groups, resources, verbs) in the launch's namespace only, and the
    RoleBinding between them."""
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(launch, name, component),
             "automountServiceAccountToken": False},
            {"apiVersion": RBAC_API, "kind": "Role", "metadata": meta(launch, name, component),
             "rules": [{"apiGroups": list(r.api_groups), "resources": list(r.resources), "verbs": list(r.verbs)}
                       for r in rules]},
            {"apiVersion": RBAC_API, "kind": "RoleBinding", "metadata": meta(launch, name, component),
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": launch.settings.namespace}]}]


def pod_labels(obj: dict, lws_labels) -> list:
    """The labels of each pod a rendered Deployment or LeaderWorkerSet makes: its templates' own
    and, for a LeaderWorkerSet, the set's name and each pod's worker index, which LWS adds (the
    leader is worker 0); the group index, also LWS's, is any group's."""
    if obj.get("kind") == "Deployment":
        return [dict(obj["spec"]["template"]["metadata"].get("labels", {}))]
    if obj.get("kind") != "LeaderWorkerSet":
        return []
    name_label, index_label = lws_labels
    spec, name = obj["spec"]["leaderWorkerTemplate"], obj["metadata"]["name"]
    templates = [spec.get("leaderTemplate", spec["workerTemplate"])] + [spec["workerTemplate"]] * (spec["size"] - 1)
    return [{**t["metadata"].get("labels", {}), name_label: name, index_label: str(i)} for i, t in enumerate(templates)]


def _matches(terms, labels: dict) -> bool:
    for term in terms:
        key, _, value = term.partition("=")
        if key == GROUP_INDEX_LABEL and value.isdigit():
            continue  # every group's pods: group 0 and those KIMI_REPLICAS / an autoscaler adds
        if labels.get(key) != value:
            return False
    return True


def check_selector(launch, copies: list, lws_labels) -> None:
    """The router discovers the copies by KIMI_ROUTER_SELECTOR (`plan --format k8s` sets it; a value
    set by hand is kept): refuse one that matches none of the rendered copies' pods (or, for a PD
    fleet, none of a pool's), which would leave the router with no copy to send a request to."""
    choice = launch.fleet
    if choice is None or choice.front != "vllm-router" or not choice.selector:
        return
    pods = [(obj["metadata"]["labels"].get("app.kubernetes.io/component"), labels)
            for obj in copies for labels in pod_labels(obj, lws_labels)]
    topology = launch.plan.topology
    pools = [p.name for p in topology.pools] if topology.pd else [None]
    for pool in pools:
        terms = choice.pool_selector(pool)
        own = [labels for role, labels in pods if pool is None or role == pool]
        if own and not any(_matches(terms, labels) for labels in own):
            whose = f"the {pool} pool's pods" if pool else "the copies' pods"
            shown = ",".join(f"{k}={v}" for k, v in sorted(own[0].items()))
            raise KimiError(INVALID_VALUE, f"KIMI_ROUTER_SELECTOR={','.join(choice.selector)[:200]} matches none of "
                            f"{whose} (the first carries {shown[:300]}), so the router would discover no copy: "
                            "give terms those pods carry, or unset KIMI_ROUTER_SELECTOR (plan --format k8s sets it).")
