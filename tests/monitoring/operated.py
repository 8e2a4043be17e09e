"""Rendered deployments with monitoring and autoscaling on, and every PromQL query they carry."""

from __future__ import annotations

import json

from tests.deploy.shapes import documents

OPERATED = {
    "single-keda": {"KIMI_HARDWARE": "h200", "KIMI_MONITORING": "1", "KIMI_AUTOSCALING": "keda"},
    "multi-hpa": {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2", "KIMI_MONITORING": "1",
                  "KIMI_AUTOSCALING": "hpa"},
    "pd-keda": {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_MONITORING": "1",
                "KIMI_AUTOSCALING": "keda"},
}
# The Prometheus adapter rule docs/operate.md gives: series vllm:<x> are served as vllm_<x>
ADAPTER_PREFIX = ("vllm_", "vllm:")


def objects(case: str) -> list:
    return documents("k8s", OPERATED[case])


def queries(docs: list) -> dict:
    """where -> PromQL, for every query of the rules, the dashboard and the autoscalers."""
    out = {}
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "PrometheusRule":
            for group in doc["spec"]["groups"]:
                out.update({f"{name}/{r['alert']}": r["expr"] for r in group["rules"]})
        elif kind == "ConfigMap" and "grafana_dashboard" in doc["metadata"]["labels"]:
            for dash in doc["data"].values():
                dash = json.loads(dash)
                out.update({f"dashboard/{p['title']}/{t['refId']}": t["expr"] for p in dash["panels"] for t in p["targets"]})
                out.update({f"dashboard/${v['name']}": v["query"] for v in dash["templating"]["list"] if v["type"] == "query"})
        elif kind == "ScaledObject":
            out.update({f"{name}/{t['name']}": t["metadata"]["query"] for t in doc["spec"]["triggers"]})
        elif kind == "HorizontalPodAutoscaler":
            for m in doc["spec"]["metrics"]:
                metric = m["pods"]["metric"]["name"]
                assert metric.startswith(ADAPTER_PREFIX[0])
                out[f"{name}/{metric}"] = ADAPTER_PREFIX[1] + metric[len(ADAPTER_PREFIX[0]):] + "{}"
    return out
