"""What a fleet (core/fleet.py, docs/fleet.md) asks of a rendering for hosts (Compose): one node holds
one copy, so the router on this node is given every copy's address (KIMI_REPLICA_ADDRS, this node's
own included, e.g. 127.0.0.1); a Gateway is a Kubernetes rendering. Also what the Kubernetes
renderings of a fleet share (render/k8s_fleet.py, render/gateway.py): the copies' selector and a
ServiceAccount with its Role and RoleBinding (their checkov skips: render/k8s_objects.py with_skips)."""

from __future__ import annotations

from entrypoint.core.errors import MISSING_SETTING, UNSUPPORTED_COMBINATION, KimiError
from entrypoint.render.k8s_objects import meta


def check_hosts(settings, sel, fmt: str) -> None:
    from entrypoint.core.fleet import choose

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
        for pool in (sel.prefill, sel.decode):
            out.append(f"{pool.role}:{name_label}={name}-{pool.role}")
            if pool.serving_nodes < pool.node_count:
                out.append(f"{pool.role}:{index_label}=0")
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
