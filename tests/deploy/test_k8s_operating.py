"""The operating bugs of `plan --format k8s` that a cluster shows and a schema does not (issue 29):
- the NetworkPolicies admit the metrics scraper to every endpoint a PodMonitor scrapes (a PD
  pool's :8001 and :8002, a KV store's instances, a multi-node group's serving workers), from
  KIMI_SCRAPER_NAMESPACE / KIMI_SCRAPER_LABELS, and open nothing else;
- a KV store's autoscaler, PDB, copies and rollout concern the engines, never the Mooncake master;
- a Deployment's cache claim that two pods can hold at once (copies, an autoscaler's surge) is
  ReadWriteMany; one pod, ReadWriteOnce;
- a multi_node_tp_dp group scales on the queue of every head of the group, not the leader's only.
Reachability is judged by tests/deploy/netpol.py (the API's NetworkPolicy semantics)."""

from __future__ import annotations

import pytest

from entrypoint.core.base.errors import KimiError
from tests.deploy import netpol
from tests.deploy.shapes import K8S, documents

OPERATED = {"KIMI_MONITORING": "1"}


def _policies(docs):
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(K8S))
def test_the_scraper_reaches_every_scrape_target_and_no_other_pod_does(case):
    docs = documents("k8s", {**K8S[case], **OPERATED})
    targets = netpol.scrape_targets(docs)
    assert targets, "the PodMonitor scrapes nothing"
    prometheus = netpol.scraper()
    stranger = netpol.Pod("default", {"app": "curl"}, {}, "curl", {netpol.NAMESPACE_LABEL: "default"})
    (api,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-api")]
    api_port = api["spec"]["ports"][0]["port"]
    for pod, port in targets:
        assert netpol.allowed(_policies(docs), prometheus, pod, port), (pod.owner, port)
        # another namespace reaches a metrics port only where it is the API port of an API pod
        served = all(pod.labels.get(k) == v for k, v in api["spec"]["selector"].items())
        assert netpol.allowed(_policies(docs), stranger, pod, port) == (served and port == api_port), (pod.owner, port)


def test_pd_pools_and_kv_instances_are_scraped_through_the_policies():
    """The ports the issue found blocked: prefill :8001, decode :8002, a KV store's instances."""
    pd = documents("k8s", {**K8S["pd-h200"], **OPERATED})
    assert sorted({port for _, port in netpol.scrape_targets(pd)}) == [8001, 8002]
    kv = documents("k8s", {**K8S["kv-centralized-h200x3"], **OPERATED})
    instances = [(p, port) for p, port in netpol.scrape_targets(kv) if p.labels["app.kubernetes.io/component"] == "instance"]
    assert instances and all(netpol.allowed(_policies(kv), netpol.scraper(), p, port) for p, port in instances)
    # without the metrics policy (as rendered before), the scraper does not reach them
    without = [p for p in _policies(pd) if not p["metadata"]["name"].endswith("-metrics")]
    assert not any(netpol.allowed(without, netpol.scraper(), p, port) for p, port in netpol.scrape_targets(pd))


def test_the_scraper_is_named_by_its_namespace_and_labels():
    environ = {**K8S["pd-h200"], **OPERATED, "KIMI_SCRAPER_NAMESPACE": "observability",
               "KIMI_SCRAPER_LABELS": "app.kubernetes.io/name=prometheus,team=obs"}
    docs = documents("k8s", environ)
    pod, port = netpol.scrape_targets(docs)[0]
    ours = netpol.scraper("observability", {"app.kubernetes.io/name": "prometheus", "team": "obs"})
    assert netpol.allowed(_policies(docs), ours, pod, port)
    assert not netpol.allowed(_policies(docs), netpol.scraper("monitoring", ours.labels), pod, port)
    assert not netpol.allowed(_policies(docs), netpol.scraper("observability", {"app.kubernetes.io/name": "grafana"}),
                              pod, port)
    with pytest.raises(KimiError, match="KIMI_SCRAPER_LABELS"):
        documents("k8s", {**environ, "KIMI_SCRAPER_LABELS": "no-equals-sign"})


def _by(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.parametrize("extra", [{"KIMI_AUTOSCALING": "keda"}, {"KIMI_AUTOSCALING": "hpa"}, {"KIMI_REPLICAS": "2"}])
def test_units_of_a_kv_stores_pd_cluster_are_refused_with_the_way_out(extra):
    """Each group an autoscaler adds to a PD pool is a unit of its own (a PD fleet, docs/fleet.md),
    which a KV store's one master does not serve: refused, the way out its pools' sizes."""
    with pytest.raises(KimiError, match="KIMI_PREFILL_NODES") as err:
        documents("k8s", {**K8S["kv-centralized-pd-b200"], **extra})
    assert err.value.code == "unsupported_combination" and "KIMI_AUTOSCALING=off" in err.value.message


@pytest.mark.parametrize("extra", [{"KIMI_REPLICAS": "2"}, {"KIMI_AUTOSCALING": "keda"}])
def test_copies_of_a_kv_store_without_pools_are_refused_not_a_second_master(extra):
    with pytest.raises(KimiError, match="KIMI_KV_INSTANCES") as err:
        documents("k8s", {**K8S["kv-centralized-h200x3"], **extra})
    assert next(iter(extra)) in err.value.message


@pytest.mark.parametrize("extra, access", [({}, "ReadWriteOnce"), ({"KIMI_REPLICAS": "2"}, "ReadWriteMany"),
                                           ({"KIMI_AUTOSCALING": "keda"}, "ReadWriteMany"),
                                           ({"KIMI_AUTOSCALING": "hpa"}, "ReadWriteMany")])
def test_a_cache_claim_two_pods_can_hold_is_shared_capable(extra, access):
    docs = documents("k8s", {**K8S["single-h200"], **extra})
    (claim,) = _by(docs, "PersistentVolumeClaim").values()
    assert claim["spec"]["accessModes"] == [access]
    (deployment,) = [d for d in _by(docs, "Deployment").values()  # a fleet's router (KIMI_REPLICAS) holds no claim
                     if d["metadata"]["labels"]["app.kubernetes.io/component"] != "router"]
    pods_at_once = deployment["spec"]["replicas"] + (
        deployment["spec"].get("strategy", {}).get("rollingUpdate", {}).get("maxSurge", 0))
    assert (pods_at_once > 1) == (access == "ReadWriteMany")
    # the per-pod claims of the other owners stay ReadWriteOnce: each pod has its own
    for lws in _by(documents("k8s", {**K8S["multi_node_tp-h100x2"], **extra}), "LeaderWorkerSet").values():
        assert lws["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_a_dep_group_scales_on_the_queue_of_every_head():
    docs = documents("k8s", {**K8S["linear-dep-mi325x2"], "KIMI_AUTOSCALING": "keda"})
    (lws,) = _by(docs, "LeaderWorkerSet").values()
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert worker["spec"]["containers"][0]["ports"][0]["name"] == "http"  # hybrid LB: the workers serve (and queue) too
    (scaled,) = _by(docs, "ScaledObject").values()
    waiting = next(t for t in scaled["spec"]["triggers"] if t["name"] == "waiting")["metadata"]["query"]
    assert 'kimi_component=~"head|worker"' in waiting
    # a TP group's workers are headless, and so are a tp_dp group's (deliberate difference
    # tp-dp-lb-mismatch, docs/composition.md): its leader's queue is the group's
    for case in ("multi_node_tp-h100x2", "k3-tp_dp-gb300x4"):
        docs = documents("k8s", {**K8S[case], "KIMI_AUTOSCALING": "keda"})
        (lws,) = _by(docs, "LeaderWorkerSet").values()
        assert "ports" not in lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        (scaled,) = _by(docs, "ScaledObject").values()
        assert 'kimi_component="head"' in scaled["spec"]["triggers"][0]["metadata"]["query"]
