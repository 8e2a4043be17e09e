"""Monitoring objects of a Kubernetes deployment (`plan --format k8s` with KIMI_MONITORING=1, and
the Helm chart's `monitoring.enabled`): a PodMonitor for the engine pods that serve the API, a
PrometheusRule with the alerts, a Grafana dashboard ConfigMap (label `grafana_dashboard`).

Every query comes from `monitoring` in recipes/serving.yaml, where `${match}` stands for the
matchers that select this deployment's series and `${<setting>}` for a setting's value. The
PodMonitor copies the pod labels named there onto every series (`kimi_deployment`,
`kimi_component`), so one Prometheus can watch many deployments. The router (vllm-router) is not
scraped: the engines' own metrics cover the requests it forwards.
"""

from __future__ import annotations

import json

MONITORING_API = "monitoring.coreos.com/v1"
DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_FILE = "kimi-serve.json"
# The dashboard's own variables (Grafana fills them): the namespace and the deployment.
DASHBOARD_MATCH = 'namespace="$namespace",kimi_deployment="$deployment"'


def facts(catalog):
    return catalog.serving.monitoring


def series_label(catalog, pod_label: str) -> str:
    return facts(catalog).pod_labels[pod_label]


def engine_components(launch) -> list:
    """The components (pod label values) of the pods that serve vLLM's API (and so /metrics)."""
    roles = [p.role for p in launch.plan.engines if p.serves_http]
    return list(dict.fromkeys(roles))


def match(launch, component: str = "") -> str:
    """PromQL matchers selecting this deployment's engine series (one component's, if given)."""
    cat = launch.catalog
    out = f'namespace="{launch.settings.namespace}",{series_label(cat, "app.kubernetes.io/name")}="{launch.name}"'
    if component:
        out += f',{series_label(cat, "app.kubernetes.io/component")}="{component}"'
    return out


def fill(text: str, launch, matchers: str) -> str:
    """An expression of the data with `${match}` and every `${<setting>}` filled."""
    text = text.replace("${match}", matchers)
    for name in ("slo_ttft_ms", "slo_itl_ms", "scale_waiting", "scale_kv_percent"):
        text = text.replace("${" + name + "}", str(launch.settings.values[name]))
    return text


def _meta(launch, name: str, component: str, labels=None) -> dict:
    own = {"app.kubernetes.io/name": launch.name, "app.kubernetes.io/part-of": "kimi-serve",
           "app.kubernetes.io/component": component}
    return {"name": name, "namespace": launch.settings.namespace, "labels": {**own, **(labels or {})}}


def pod_monitor(launch) -> dict:
    m, name = facts(launch.catalog), launch.name
    relabel = [{"sourceLabels": ["__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)],
                "targetLabel": target} for label, target in sorted(m.pod_labels.items())]
    selector = {"matchLabels": {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "kimi-serve"},
                "matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In",
                                      "values": engine_components(launch)}]}
    return {"apiVersion": MONITORING_API, "kind": "PodMonitor", "metadata": _meta(launch, f"{name}-engines", "monitoring"),
            "spec": {"selector": selector, "podMetricsEndpoints": [
                {"port": "http", "path": m.path, "interval": f"{m.interval_s}s", "relabelings": relabel}]}}


def prometheus_rule(launch) -> dict:
    m, name, matchers = facts(launch.catalog), launch.name, match(launch)
    rules = [{"alert": a.name, "expr": fill(a.expr, launch, matchers), "for": a.for_,
              "labels": {"severity": a.severity},
              "annotations": {"summary": fill(a.summary, launch, matchers),
                              "description": fill(a.action, launch, matchers)}} for a in m.alerts]
    return {"apiVersion": MONITORING_API, "kind": "PrometheusRule", "metadata": _meta(launch, f"{name}-alerts", "monitoring"),
            "spec": {"groups": [{"name": f"kimi-serve.{name}", "rules": rules}]}}


def dashboard(catalog) -> dict:
    """The Grafana dashboard (the same for every deployment: its variables pick one)."""
    d = facts(catalog).dashboard
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    label = series_label(catalog, "app.kubernetes.io/name")
    metric = d.variable_metric

    def variable(name: str, query: str) -> dict:
        return {"name": name, "type": "query", "datasource": datasource, "query": query, "refresh": 2,
                "includeAll": False, "multi": False}

    variables = [{"name": "datasource", "type": "datasource", "query": "prometheus"},
                 variable("namespace", f"label_values({metric}, namespace)"),
                 variable("deployment", f'label_values({metric}{{namespace="$namespace"}}, {label})')]
    panels = []
    for i, p in enumerate(d.panels):
        targets = [{"refId": chr(ord("A") + j), "datasource": datasource, "legendFormat": legend,
                    "expr": expr.replace("${match}", DASHBOARD_MATCH)} for j, (legend, expr) in enumerate(p.exprs.items())]
        panels.append({"id": i + 1, "type": "timeseries", "title": p.title, "datasource": datasource,
                       "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                       "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []}, "targets": targets})
    return {"uid": d.uid, "title": d.title, "tags": ["kimi-serve", "vllm"], "timezone": "browser",
            "schemaVersion": 39, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
            "templating": {"list": variables}, "panels": panels}


def dashboard_json(catalog) -> str:
    return json.dumps(dashboard(catalog), indent=2) + "\n"


def dashboard_configmap(launch) -> dict:
    name = launch.name
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(launch, f"{name}-dashboard", "monitoring", {DASHBOARD_LABEL: "1"}),
            "data": {DASHBOARD_FILE: dashboard_json(launch.catalog)}}


def objects(launch) -> list:
    """The monitoring objects, when KIMI_MONITORING asks for them."""
    if not launch.settings.values["monitoring"]:
        return []
    return [pod_monitor(launch), prometheus_rule(launch), dashboard_configmap(launch)]
