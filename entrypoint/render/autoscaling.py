"""Autoscaling and disruption of a Kubernetes deployment (`plan --format k8s` with
KIMI_AUTOSCALING=keda|hpa, and the Helm chart's `autoscaling.enabled`).

Each engine group (the single-node Deployment, the multi-node LeaderWorkerSet, each pool of a PD
cluster) gets, with an autoscaler:
- a KEDA ScaledObject (`keda`) or an autoscaling/v2 HorizontalPodAutoscaler on the Prometheus
  adapter's metrics (`hpa`) over the triggers of `monitoring.scale_triggers` in
  recipes/serving.yaml (waiting requests per copy, average KV-cache usage), between KIMI_REPLICAS
  and KIMI_MAX_REPLICAS copies; a LeaderWorkerSet scales by whole groups (its replicas);
- scale-down stabilisation and KEDA's cooldown of the start-up budget (recipes/serving.yaml
  `health.start_period_s`): a copy is never removed sooner than a new one takes to load;
- a PodDisruptionBudget of one unavailable pod;
- a rollout that never drops below serving capacity: one copy surged, none unavailable, and a
  Deployment's progress deadline past the recipe's bound on a start (its startupProbe's);
- zone spread of the single-node copies and of the router (a multi-node group stays where its
  interconnect is).
KIMI_REPLICAS alone (no autoscaler) sets the copies; the rollout then stays as rendered.
"""

from __future__ import annotations

from entrypoint.core.base.errors import UNSUPPORTED_COMBINATION, KimiError
from entrypoint.render.deployment import health, startup_bound
from entrypoint.render.monitoring import facts, fill, match

KEDA_API = "keda.sh/v1alpha1"
HPA_API = "autoscaling/v2"
PDB_API = "policy/v1"
ZONE = "topology.kubernetes.io/zone"
SURGE = {"maxSurge": 1, "maxUnavailable": 0}
ENGINE_KINDS = ("Deployment", "LeaderWorkerSet")
# printf-style, so that the Helm chart fails with the same words (files/facts.json)
KV_COPIES = ("KIMI_KV_OFFLOAD=%s runs KIMI_KV_INSTANCES=%d instances that its cache-aware router lists by name, so %s "
             "would add engines it never routes to (and a second Mooncake master). Set KIMI_KV_INSTANCES for more "
             "instances and unset KIMI_REPLICAS and KIMI_AUTOSCALING, or use KIMI_STRATEGY=pd_cluster, whose pools "
             "scale.")


FEWER_MAX = ("KIMI_MAX_REPLICAS=%d is below KIMI_REPLICAS=%d, the fewest copies the autoscaler keeps: set "
             "KIMI_MAX_REPLICAS (the chart's autoscaling.maxReplicas) to %d or more, or fewer KIMI_REPLICAS.")


def start_budget_s(launch) -> int:
    """recipes/serving.yaml's start period: how long a new copy takes to load, for the scale-down
    window (the same for every launch, as the chart draws it)."""
    return launch.catalog.serving.health.start_period_s


def _engine_groups(launch, objects: list) -> list:
    """The objects that run engines: every Deployment and LeaderWorkerSet of GPU processes (not
    the router, not a KV store's master)."""
    engines = {p.role for p in launch.plan.processes if p.local_gpus}
    return [o for o in objects if o["kind"] in ENGINE_KINDS
            and o["metadata"]["labels"]["app.kubernetes.io/component"] in engines]


def _serving_components(obj: dict) -> list:
    """The components of a group's pods that serve the API (and so its queue): a Deployment's
    pod; a LeaderWorkerSet's leader, and its workers where they serve too (multi_node_tp_dp,
    DEP: every head of the group)."""
    templates = [obj["spec"]["template"]] if obj["kind"] == "Deployment" else \
        [t for k, t in sorted(obj["spec"]["leaderWorkerTemplate"].items()) if k in ("leaderTemplate", "workerTemplate")]
    out = []
    for t in templates:
        serves = any(port.get("name") == "http" for c in t["spec"]["containers"] for port in c.get("ports", ()))
        component = t["metadata"]["labels"]["app.kubernetes.io/component"]
        if serves and component not in out:
            out.append(component)
    return out


def _kv_store_copies(launch) -> None:
    """A KV store's instances (no PD pools) are KIMI_KV_INSTANCES pods its router lists by name:
    copies or an autoscaler would add engines nobody routes to, or a second master."""
    values = launch.settings.values
    if not launch.plan.topology.kv_store or launch.plan.topology.pd:
        return
    if values["replicas"] > 1 or values["autoscaling"] != "off":
        asked = f"KIMI_REPLICAS={values['replicas']}" if values["replicas"] > 1 else \
            f"KIMI_AUTOSCALING={values['autoscaling']}"
        raise KimiError(UNSUPPORTED_COMBINATION, KV_COPIES % (launch.kv.id, launch.kv.instances, asked))


def _pod_labels(obj: dict) -> dict:
    if obj["kind"] == "Deployment":
        return dict(obj["spec"]["selector"]["matchLabels"])
    return {"leaderworkerset.sigs.k8s.io/name": obj["metadata"]["name"]}


def _behavior(launch) -> dict:
    budget = start_budget_s(launch)
    return {"scaleDown": {"stabilizationWindowSeconds": budget, "policies": [{"type": "Pods", "value": 1,
                                                                              "periodSeconds": budget}]},
            "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 1,
                                                                       "periodSeconds": 60}]}}


def _ref(obj: dict) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"]}


def _meta(obj: dict) -> dict:
    meta = obj["metadata"]
    return {"name": meta["name"], "namespace": meta["namespace"], "labels": dict(meta["labels"])}


def _max_replicas(launch) -> int:
    return launch.settings.values["max_replicas"]


def _scaled_object(launch, obj: dict) -> dict:
    values, components = launch.settings.values, _serving_components(obj)
    triggers = [{"type": "prometheus", "name": t.name, "metricType": "AverageValue" if t.average else "Value",
                 "metadata": {"serverAddress": values["prometheus_url"],
                              "query": fill(t.query, launch, match(launch, components)),
                              "threshold": str(values[t.target])}}
                for t in facts(launch.catalog).scale_triggers]
    return {"apiVersion": KEDA_API, "kind": "ScaledObject", "metadata": _meta(obj),
            "spec": {"scaleTargetRef": _ref(obj), "minReplicaCount": values["replicas"],
                     "maxReplicaCount": _max_replicas(launch), "pollingInterval": 30,
                     "cooldownPeriod": start_budget_s(launch),
                     "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(launch)}},
                     "triggers": triggers}}


def target_suffix(trigger) -> str:
    """What follows a trigger's target in an HPA's averageValue (a Kubernetes quantity): a percent of a
    fraction's series as hundredths."""
    return "" if trigger.average else "e-2"


def _hpa(launch, obj: dict) -> dict:
    values = launch.settings.values

    def target(t) -> str:
        # the adapter serves the series as they are: KV-cache usage is a fraction, its target a percent,
        # written as given with a decimal exponent (75e-2 = 0.75): the chart draws it with no arithmetic
        return f"{values[t.target]}{target_suffix(t)}"

    metrics = [{"type": "Pods", "pods": {"metric": {"name": t.adapter_metric},
                                         "target": {"type": "AverageValue", "averageValue": target(t)}}}
               for t in facts(launch.catalog).scale_triggers]
    return {"apiVersion": HPA_API, "kind": "HorizontalPodAutoscaler", "metadata": _meta(obj),
            "spec": {"scaleTargetRef": _ref(obj), "minReplicas": values["replicas"],
                     "maxReplicas": _max_replicas(launch), "metrics": metrics, "behavior": _behavior(launch)}}


def _pdb(obj: dict) -> dict:
    return {"apiVersion": PDB_API, "kind": "PodDisruptionBudget", "metadata": _meta(obj),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _pod_labels(obj)}}}


def _spread(pod_spec: dict, labels: dict) -> None:
    pod_spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                                              "labelSelector": {"matchLabels": dict(labels)}}]


def _roll_out(launch, obj: dict) -> None:
    """Surge one copy, none unavailable; a Deployment's deadline past the start-up budget."""
    if obj["kind"] == "Deployment":
        obj["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": dict(SURGE)}
        obj["spec"]["progressDeadlineSeconds"] = startup_bound(launch) + health(launch).interval_s * health(launch).retries
        _spread(obj["spec"]["template"]["spec"], obj["spec"]["selector"]["matchLabels"])
    else:
        obj["spec"]["rolloutStrategy"] = {"type": "RollingUpdate", "rollingUpdateConfiguration": dict(SURGE)}


def apply(launch, objects: list) -> list:
    """The objects with their copies and rollouts set, and the autoscaling objects after them."""
    _kv_store_copies(launch)
    values, engines = launch.settings.values, _engine_groups(launch, objects)
    for obj in engines:
        obj["spec"]["replicas"] = values["replicas"]
    if values["autoscaling"] == "off":
        return objects
    if values["max_replicas"] < values["replicas"]:  # as given: the chart draws the bounds from its values
        raise KimiError(UNSUPPORTED_COMBINATION, FEWER_MAX % (values["max_replicas"], values["replicas"], values["replicas"]))
    for obj in objects:  # the engines and the router; a KV store's master stays one (Recreate)
        if obj in engines or (obj["kind"] in ENGINE_KINDS and obj["metadata"]["labels"]["app.kubernetes.io/component"]
                              == "router"):
            _roll_out(launch, obj)
    scaler = _scaled_object if values["autoscaling"] == "keda" else _hpa
    return objects + [scaler(launch, obj) for obj in engines] + [_pdb(obj) for obj in engines]
