"""What monitoring and autoscaling add to `plan --format k8s`, checked on the rendered objects
(expected values written here by hand from the issue: surge one, none unavailable; scale-down
slower than a model load; one autoscaler and one PDB per engine group; the PodMonitor selects
exactly the pods that serve vLLM's API)."""

from __future__ import annotations

import pytest

from tests.deploy.shapes import documents

START_BUDGET_S = 3600  # recipes/serving.yaml health.start_period_s: a 600 GB load
H200_PD = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "2", "KIMI_DECODE_NODES": "1",
           "KIMI_PREFILL_PARALLELISM": "tp"}


def _by(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _pod_templates(doc):
    if doc["kind"] == "Deployment":
        yield doc["spec"]["template"]
    else:
        lwt = doc["spec"]["leaderWorkerTemplate"]
        yield from (lwt[k] for k in ("leaderTemplate", "workerTemplate") if k in lwt)


def _selects(selector: dict, labels: dict) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    return all(labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", []))


def test_off_by_default_plan_renders_no_operating_objects():
    docs = documents("k8s", {"KIMI_HARDWARE": "h200"})
    assert {d["kind"] for d in docs} == {"Namespace", "ConfigMap", "PersistentVolumeClaim", "Deployment", "Service",
                                         "NetworkPolicy"}
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"} == {"kimi-k2-5-settings"}  # no dashboard
    assert _by(docs, "Deployment")["kimi-k2-5"]["spec"]["strategy"] == {"type": "Recreate"}


def test_single_node_keda_scales_the_deployment_between_the_replicas():
    docs = documents("k8s", {"KIMI_HARDWARE": "h200", "KIMI_AUTOSCALING": "keda", "KIMI_REPLICAS": "2",
                             "KIMI_MAX_REPLICAS": "5"})
    deployment = _by(docs, "Deployment")["kimi-k2-5"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    assert deployment["spec"]["progressDeadlineSeconds"] > probe["periodSeconds"] * probe["failureThreshold"] >= START_BUDGET_S
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread[0]["topologyKey"] == "topology.kubernetes.io/zone" and spread[0]["maxSkew"] == 1
    (scaled,) = _by(docs, "ScaledObject").values()
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "kimi-k2-5"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 5)
    assert spec["cooldownPeriod"] >= START_BUDGET_S
    down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] >= START_BUDGET_S
    queries = {t["name"]: t for t in spec["triggers"]}
    assert queries["waiting"]["metadata"]["query"] == (
        'sum(vllm:num_requests_waiting{namespace="kimi-serve",kimi_deployment="kimi-k2-5",kimi_component="single"})')
    assert queries["waiting"]["metricType"] == "AverageValue" and queries["waiting"]["metadata"]["threshold"] == "8"
    assert queries["kv-cache"]["metricType"] == "Value" and queries["kv-cache"]["metadata"]["threshold"] == "80"
    (pdb,) = _by(docs, "PodDisruptionBudget").values()
    assert pdb["spec"]["maxUnavailable"] == 1
    assert _selects(pdb["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])


def test_multi_node_scales_whole_groups_with_the_hpa():
    docs = documents("k8s", {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2",
                             "KIMI_AUTOSCALING": "hpa", "KIMI_SCALE_KV_PERCENT": "75"})
    lws = _by(docs, "LeaderWorkerSet")["kimi-k2-5"]
    assert lws["spec"]["rolloutStrategy"] == {"type": "RollingUpdate",
                                              "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0}}
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2  # a copy is a whole group
    (hpa,) = _by(docs, "HorizontalPodAutoscaler").values()
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                             "name": "kimi-k2-5"}
    targets = {m["pods"]["metric"]["name"]: m["pods"]["target"] for m in hpa["spec"]["metrics"]}
    assert targets == {"vllm_num_requests_waiting": {"type": "AverageValue", "averageValue": "8"},
                       "vllm_kv_cache_usage_perc": {"type": "AverageValue", "averageValue": "75e-2"}}
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= START_BUDGET_S
    (pdb,) = _by(docs, "PodDisruptionBudget").values()
    for template in _pod_templates(lws):
        # LWS adds its name label to every pod it creates
        assert _selects(pdb["spec"]["selector"], {**template["metadata"]["labels"],
                                                   "leaderworkerset.sigs.k8s.io/name": "kimi-k2-5"})


def test_pd_scales_each_pool_and_never_the_router():
    docs = documents("k8s", {**H200_PD, "KIMI_AUTOSCALING": "keda"})
    scaled = _by(docs, "ScaledObject")
    assert sorted(scaled) == ["kimi-k2-5-decode", "kimi-k2-5-prefill"]
    for pool, obj in scaled.items():
        role = pool.rsplit("-", 1)[1]
        assert obj["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
        assert all(f'kimi_component="{role}"' in t["metadata"]["query"] for t in obj["spec"]["triggers"])
    assert sorted(_by(docs, "PodDisruptionBudget")) == ["kimi-k2-5-decode", "kimi-k2-5-prefill"]
    router = _by(docs, "Deployment")["kimi-k2-5-router"]
    assert router["spec"]["replicas"] == 1 and router["spec"]["strategy"]["type"] == "RollingUpdate"


@pytest.mark.parametrize("environ", [
    {"KIMI_HARDWARE": "h200"},
    {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "3"},
    {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_dep", "KIMI_NODES": "2"},
    H200_PD,
])
def test_pod_monitor_scrapes_every_engine_serving_the_api_and_not_the_router(environ):
    docs = documents("k8s", {**environ, "KIMI_MONITORING": "1"})
    (monitor,) = _by(docs, "PodMonitor").values()
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    seen = 0
    for doc in docs:
        if doc["kind"] not in ("Deployment", "LeaderWorkerSet"):
            continue
        for template in _pod_templates(doc):
            serves = "ports" in template["spec"]["containers"][0]
            router = template["metadata"]["labels"]["app.kubernetes.io/component"] == "router"
            selected = _selects(monitor["spec"]["selector"], template["metadata"]["labels"])
            # every engine that serves the API is scraped; the router never; a headless worker a pool
            # shares its label with is selected but makes no target (it has no port named http)
            assert selected == (not router) if serves else not (router and selected), template["metadata"]
            seen += serves and not router
    assert seen


def test_alert_thresholds_come_from_the_slo_settings():
    docs = documents("k8s", {"KIMI_HARDWARE": "h200", "KIMI_MONITORING": "1", "KIMI_SLO_TTFT_MS": "750",
                             "KIMI_SLO_ITL_MS": "40"})
    (rule,) = _by(docs, "PrometheusRule").values()
    rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert rules["KimiTimeToFirstTokenHigh"]["expr"].endswith("* 1000 > 750")
    assert rules["KimiInterTokenLatencyHigh"]["expr"].endswith("* 1000 > 40")
    assert "750 ms" in rules["KimiTimeToFirstTokenHigh"]["annotations"]["summary"]
    dashboard = _by(docs, "ConfigMap")["kimi-k2-5-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
