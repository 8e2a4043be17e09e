"""A fleet's autoscaler scales on the fleet's queue, not one pod's (render/autoscaling.py, docs/fleet.md),
through Prometheus' own promtool: each ScaledObject trigger's query, evaluated over the series the
rendered PodMonitor gives every copy's pods (its relabelings of the pods' labels, every unit of a
PD fleet, every group of a pool), is the sum over every copy's API pods of that pool, and
nothing of the other pool or the router. vllm-router 0.1.17 exports no queue gauge of its own
(tests/data/vllm-router-0.1.17: its running requests per worker, its PD decode pending/active per
worker), so the engines' waiting requests are the fleet's queue."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.deploy.shapes import documents
from tests.monitoring.test_promtool import promtool  # noqa: F401 - the fixture
from tests.testdata import DATA

H200 = {"KIMI_HARDWARE": "h200", "KIMI_AUTOSCALING": "keda", "KIMI_MONITORING": "1"}
FLEETS = {
    "single-x3": {**H200, "KIMI_REPLICAS": "3"},
    "pd-x2": {**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "2"},
    "pd-tp-x3": {**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "3", "KIMI_PREFILL_NODES": "2",
                 "KIMI_PREFILL_PARALLELISM": "tp", "KIMI_DECODE_PARALLELISM": "tp"},
}


def _serving_pods(docs) -> list:
    """(owner, pod name, labels) of every pod that serves the API, as the copies' owners make them."""
    out = []
    for obj in docs:
        if obj["kind"] == "Deployment" and obj["metadata"]["labels"]["app.kubernetes.io/component"] != "router":
            for i in range(obj["spec"]["replicas"]):
                out.append((obj["metadata"]["name"], f"{obj['metadata']['name']}-{i}",
                            obj["spec"]["template"]["metadata"]["labels"]))
        elif obj["kind"] == "LeaderWorkerSet":
            spec = obj["spec"]["leaderWorkerTemplate"]
            for group in range(obj["spec"]["replicas"]):
                for index in range(spec["size"]):
                    template = spec.get("leaderTemplate", spec["workerTemplate"]) if index == 0 else spec["workerTemplate"]
                    if any(p["name"] == "http" for c in template["spec"]["containers"] for p in c.get("ports", ())):
                        out.append((obj["metadata"]["name"], f"{obj['metadata']['name']}-{group}-{index}",
                                    template["metadata"]["labels"]))
    return out


def _series_labels(monitor: dict, pod: str, labels: dict, namespace: str) -> dict:
    """The labels Prometheus gives the pod's series: the PodMonitor's relabelings of its labels."""
    out = {"namespace": namespace, "pod": pod}
    for relabel in monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]:
        (source,) = relabel["sourceLabels"]
        key = next(k for k in labels if source == "__meta_kubernetes_pod_label_" + "".join(
            c if c.isalnum() else "_" for c in k))
        out[relabel["targetLabel"]] = labels[key]
    return out


def _series(name: str, labels: dict) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


@pytest.mark.parametrize("case", sorted(FLEETS))
def test_each_scaler_sums_the_queue_of_every_copy(case, promtool, tmp_path):  # noqa: F811
    docs = documents("k8s", FLEETS[case])
    monitor = next(d for d in docs if d["kind"] == "PodMonitor" and d["metadata"]["name"].endswith("-engines"))
    namespace = monitor["metadata"]["namespace"]
    pods = _serving_pods(docs)
    waiting = {pod: 3 + 2 * i for i, (_, pod, _) in enumerate(pods)}  # each pod's queue its own
    series = [{"series": _series("vllm:num_requests_waiting", _series_labels(monitor, pod, labels, namespace)),
               "values": f"{waiting[pod]}x5"} for _, pod, labels in pods]
    series.append({"series": _series("vllm:num_requests_waiting", {"namespace": namespace, "pod": "other-0",
                                                                   "kimi_deployment": "other"}), "values": "100x5"})
    scalers = [d for d in docs if d["kind"] == "ScaledObject"]
    rules, expected = [], []
    for scaled in scalers:
        owner = scaled["spec"]["scaleTargetRef"]["name"]
        query = next(t for t in scaled["spec"]["triggers"] if t["name"] == "waiting")["metadata"]["query"]
        record = "fleet_queue_" + owner.replace("-", "_")
        rules.append({"record": record, "expr": query})
        total = sum(waiting[pod] for o, pod, _ in pods if o == owner)
        assert total and len({o for o, _, _ in pods if o == owner}) == 1
        expected.append({"expr": record, "eval_time": "2m", "exp_samples": [{"labels": record, "value": total}]})
    assert len(scalers) == (2 if "pd" in case else 1)
    rules_path = tmp_path / "rules.yaml"
    rules_path.write_text(yaml.safe_dump({"groups": [{"name": "fleet-queue", "rules": rules}]}, sort_keys=False))
    test_path = tmp_path / "tests.yaml"
    test_path.write_text(yaml.safe_dump({"rule_files": [str(rules_path)], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": series, "promql_expr_test": expected}]}, sort_keys=False))
    done = subprocess.run([promtool, "test", "rules", str(test_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_router_exports_no_queue_of_its_own():
    """What vllm-router 0.1.17 exports (recorded, regular and PD mode): no queue or waiting gauge, so a
    fleet's autoscaler reads the engines' queue."""
    for name in ("metrics-regular.txt", "metrics-pd.txt"):
        text = (DATA / "vllm-router-0.1.17" / name).read_text()
        gauges = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ") and line.endswith("gauge")}
        assert gauges, name
        assert not [g for g in gauges if "queue" in g or "waiting" in g], gauges
    regular = (DATA / "vllm-router-0.1.17" / "metrics-regular.txt").read_text()
    assert "# TYPE vllm_router_running_requests gauge" in regular
