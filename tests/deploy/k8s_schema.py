"""Validation of rendered Kubernetes objects, strict about unknown keys.

- custom objects (LeaderWorkerSet, PodMonitor, PrometheusRule, ScaledObject): jsonschema over the CRD's openAPIV3Schema from
  tests/data/k8s/ (see tests/data/PROVENANCE.md), with `additionalProperties: false` added wherever the schema lists
  properties (the API server would prune unknown keys silently; we want them to fail); the pod
  templates inside are also checked as core objects.
- Core objects: deserialized into the `kubernetes` client's models and serialized back; any key
  the models do not know is lost on the way, so the round trip must give the input back.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import jsonschema
import yaml

from tests.testdata import K8S_CRDS

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = K8S_CRDS
CRDS = {"LeaderWorkerSet": "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        # the monitoring and autoscaling objects (render/monitoring.py, render/autoscaling.py)
        "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
        "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
        "ScaledObject": "keda.sh_scaledobjects.yaml",
        # a fleet behind a Gateway (render/gateway.py)
        "InferencePool": "inference.networking.k8s.io_inferencepools.yaml"}
CORE = {"Deployment": "V1Deployment", "StatefulSet": "V1StatefulSet", "Service": "V1Service", "PersistentVolumeClaim": "V1PersistentVolumeClaim",
        "Namespace": "V1Namespace", "NetworkPolicy": "V1NetworkPolicy", "ConfigMap": "V1ConfigMap",
        "PodDisruptionBudget": "V1PodDisruptionBudget", "HorizontalPodAutoscaler": "V2HorizontalPodAutoscaler",
        # the Helm chart's own (serviceAccount.create, ingress.enabled, the `helm test` Pod); a fleet's
        # router and endpoint picker discover the copies' pods (render/k8s_fleet.py, render/gateway.py)
        "ServiceAccount": "V1ServiceAccount", "Ingress": "V1Ingress", "Pod": "V1Pod", "Job": "V1Job", "Role": "V1Role",
        "RoleBinding": "V1RoleBinding"}


def _strict(schema):
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.lru_cache(maxsize=None)
def crd_schema(kind: str):
    crd = yaml.safe_load((CRD_DIR / CRDS[kind]).read_text())
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    api_version = f"{crd['spec']['group']}/{version['name']}"
    return api_version, _strict(version["schema"]["openAPIV3Schema"])


def _roundtrip(obj: dict, model: str) -> None:
    from kubernetes.client import ApiClient

    client = ApiClient()
    typed = client._ApiClient__deserialize(copy.deepcopy(obj), model)
    back = client.sanitize_for_serialization(typed)
    assert back == obj, f"{model}: keys or values the Kubernetes models do not know:\n{obj}\n!=\n{back}"


def _embedded_parts(obj: dict):
    """(part, model) of the core objects a custom object embeds (a LeaderWorkerSet's pods and claims)."""
    yield obj["metadata"], "V1ObjectMeta"
    if obj["kind"] != "LeaderWorkerSet":
        return
    lwt = obj["spec"]["leaderWorkerTemplate"]
    yield from ((lwt[k], "V1PodTemplateSpec") for k in ("leaderTemplate", "workerTemplate") if k in lwt)
    yield from ((claim, "V1PersistentVolumeClaim") for claim in lwt.get("volumeClaimTemplates", []))


def validate(obj: dict) -> None:
    kind = obj["kind"]
    if kind in CRDS:
        api_version, schema = crd_schema(kind)
        assert obj["apiVersion"] == api_version
        # no check of the schema itself: prometheus-operator's CRDs carry Go regexes (`^(?i)...`) that
        # Python's re refuses as patterns of fields the objects do not use
        jsonschema.Draft7Validator(schema).validate(obj)
        for part, model in _embedded_parts(obj):
            _roundtrip(part, model)
        return
    assert kind in CORE, f"no validation for kind {kind}"
    _roundtrip(obj, CORE[kind])
