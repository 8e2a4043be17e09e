"""NetworkPolicy reachability, as the Kubernetes API defines it (networking.k8s.io/v1), over the
pods rendered objects create: which peer reaches which pod on which port. For the tests of
`plan --format k8s` and of the Helm chart (every scrape target reachable by the scraper, nothing
else opened).

Semantics (https://kubernetes.io/docs/concepts/services-networking/network-policies/): a pod is
isolated for ingress once any policy of its namespace selects it; a connection is then allowed
when some policy selecting it has an ingress rule whose `from` (empty: any peer) has a peer
matching the source and whose `ports` (empty: every port) hold the port. A peer with both
namespaceSelector and podSelector matches pods of the selected namespaces that the pod selector
selects; a podSelector alone means the policy's own namespace."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, List

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
NAMESPACE_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict
    ports: dict = field(default_factory=dict)  # name -> containerPort
    owner: str = ""
    namespace_labels: dict = field(default_factory=dict)

    def __hash__(self):
        return hash((self.namespace, tuple(sorted(self.labels.items())), self.owner))


def selects(selector: dict, labels: dict) -> bool:
    """A label selector (matchLabels and matchExpressions) on a label set; {} selects all."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _ports(spec: dict) -> dict:
    return {p["name"]: p["containerPort"] for c in spec["containers"] for p in c.get("ports", ()) if "name" in p}


def pods(objects: list) -> Iterator[Pod]:
    """Every pod the objects create (one per replica of group 0; LWS adds its name and index labels)."""
    for doc in objects:
        ns = doc["metadata"].get("namespace", "")
        if doc["kind"] in ("Deployment", "StatefulSet"):
            template = doc["spec"]["template"]
            yield Pod(ns, dict(template["metadata"]["labels"]), _ports(template["spec"]), doc["metadata"]["name"],
                      {NAMESPACE_LABEL: ns})
        elif doc["kind"] == "LeaderWorkerSet":
            lwt = doc["spec"]["leaderWorkerTemplate"]
            for index in range(lwt["size"]):
                template = lwt.get("leaderTemplate", lwt["workerTemplate"]) if index == 0 else lwt["workerTemplate"]
                labels = {**template["metadata"]["labels"], LWS_NAME_LABEL: doc["metadata"]["name"],
                          LWS_INDEX_LABEL: str(index)}
                yield Pod(ns, labels, _ports(template["spec"]), doc["metadata"]["name"], {NAMESPACE_LABEL: ns})


def _peer_matches(peer: dict, policy_ns: str, source: Pod) -> bool:
    if "ipBlock" in peer:
        return False  # the sources here are pods
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], source.namespace_labels):
            return False
    elif source.namespace != policy_ns:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], source.labels)


def _port_matches(rule_ports, port: int, names: dict) -> bool:
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != "TCP":
            continue
        want = p.get("port")
        if want is None or want == port or (isinstance(want, str) and names.get(want) == port):
            return True
        if isinstance(want, int) and p.get("endPort") and want <= port <= p["endPort"]:
            return True
    return False


def allowed(policies: List[dict], source: Pod, target: Pod, port: int) -> bool:
    """Whether `source` may open a TCP connection to `target` on `port`."""
    selecting = [p for p in policies if p["metadata"].get("namespace", "") == target.namespace
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                 and selects(p["spec"]["podSelector"], target.labels)]
    if not selecting:
        return True  # not isolated
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or ():
            peers = rule.get("from")
            if peers and not any(_peer_matches(peer, target.namespace, source) for peer in peers):
                continue
            if _port_matches(rule.get("ports"), port, target.ports):
                return True
    return False


def scrape_targets(objects: list) -> List[tuple]:
    """(pod, port) of every endpoint a PodMonitor of the objects scrapes."""
    out = []
    monitors = [o for o in objects if o["kind"] == "PodMonitor"]
    for monitor in monitors:
        for pod in pods(objects):
            if pod.namespace == monitor["metadata"]["namespace"] and selects(monitor["spec"]["selector"], pod.labels):
                for endpoint in monitor["spec"]["podMetricsEndpoints"]:
                    if endpoint["port"] in pod.ports:
                        out.append((pod, pod.ports[endpoint["port"]]))
    return out


def scraper(namespace: str = "monitoring", labels=None) -> Pod:
    """A Prometheus pod of kube-prometheus-stack in `namespace`."""
    return Pod(namespace, dict(labels or {"app.kubernetes.io/name": "prometheus"}), {}, "prometheus",
               {NAMESPACE_LABEL: namespace})
