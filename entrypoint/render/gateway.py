"""KIMI_ROUTER=gateway: a fleet behind the cluster's Gateway (Kubernetes; docs/fleet.md), no router of our
own. The Gateway API Inference Extension's objects, as its v1.5.0 charts publish them
(recipes/fleet.yaml `gateway`):

- an InferencePool `<name>` selecting the copies' API pods (the single-node pods; each group's
  leader) on the API port, naming its endpoint picker;
- the endpoint picker `<name>-epp`: a Deployment of the project's picker image with its plugin
  configuration (a ConfigMap: queue, KV-cache usage and prefix-cache scorers), its Service (the
  Gateway's ext_proc calls on the gRPC port; metrics), its ServiceAccount, Role (pods,
  inferencepools, ...: get/watch/list) and RoleBinding, and a NetworkPolicy admitting the
  Gateway to its gRPC port and Prometheus to its metrics port. Hardened to Pod Security
  `restricted` like every pod here (the image's own non-root UID).

An HTTPRoute from your Gateway to the InferencePool (`backendRefs: [{group:
inference.networking.k8s.io, kind: InferencePool, name: <name>}]`) attaches it (docs/fleet.md).
"""

from __future__ import annotations

from entrypoint.core.compose.fleet import load_fleet
from entrypoint.render.deployment import TERMINATION_MESSAGE
from entrypoint.render.fleet import rbac, selector
from entrypoint.render.k8s_objects import (LWS_INDEX_LABEL, LWS_NAME_LABEL, NETPOL_API, RECREATE, component_labels, meta,
                                           with_skips)
from entrypoint.render.k8s_pod import restricted_container, RUNTIME_DEFAULT
from entrypoint.render.yamltext import dump

COMPONENT = "epp"
TOKEN_SKIP = ("CKV_K8S_38=the endpoint picker watches the copies' pods and its InferencePool with its "
              "ServiceAccount's token; its Role grants get, watch and list of those in its namespace only")
TAG_SKIP = ("CKV_K8S_43=the Gateway API Inference Extension publishes its endpoint picker by tag (the release's "
            "chart); pin it by digest in your registry mirror")


def _facts():
    return load_fleet().gateway


def pool_selector(launch) -> dict:
    """The labels of the copies' API pods, as KIMI_ROUTER_SELECTOR would name them."""
    labels = selector(launch.name, launch.selection, (LWS_NAME_LABEL, LWS_INDEX_LABEL))
    return dict(item.split("=", 1) for item in labels)


def api_port(launch) -> int:
    return next(p.port for p in launch.plan.engines if p.serves_http)


def _inference_pool(launch, g) -> dict:
    return {"apiVersion": g.api_version, "kind": "InferencePool", "metadata": meta(launch, launch.name, "pool"),
            "spec": {"selector": {"matchLabels": pool_selector(launch)},
                     "targetPorts": [{"number": api_port(launch)}], "appProtocol": "http",
                     "endpointPickerRef": {"name": f"{launch.name}-{COMPONENT}",
                                           "port": {"number": g.picker.ports["grpc"]},
                                           "failureMode": g.failure_mode}}}


def _rbac(launch, picker) -> list:
    return rbac(launch, f"{launch.name}-{COMPONENT}", COMPONENT, picker.rbac)


def _picker(launch, g) -> dict:
    picker, name, ns = g.picker, f"{launch.name}-{COMPONENT}", launch.settings.namespace
    group = g.api_version.split("/", 1)[0]
    args = [picker.pool_args["name"], launch.name, picker.pool_args["namespace"], ns, picker.pool_args["group"], group,
            *picker.args, picker.config_flag, f"{picker.config_dir}/{picker.config_file}"]
    amounts = {"cpu": str(picker.resources["cpu"]), "memory": f"{picker.resources['memory_gib']}Gi"}
    grpc_health = {"grpc": {"port": picker.ports["grpc-health"], "service": picker.health_service}}
    field = [("NAMESPACE", "metadata.namespace"), ("POD_NAME", "metadata.name")]
    container = {
        "name": COMPONENT, "image": picker.image, "imagePullPolicy": "Always", **TERMINATION_MESSAGE, "args": args,
        "env": [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": path}}} for n, path in field],
        "ports": [{"name": port_name, "containerPort": number} for port_name, number in picker.ports.items()],
        "livenessProbe": {**grpc_health, "initialDelaySeconds": 5, "periodSeconds": 10},
        "readinessProbe": {**grpc_health, "periodSeconds": 2},
        "resources": {"limits": amounts, "requests": dict(amounts)},
        "securityContext": restricted_container(picker.uid, picker.uid),
        "volumeMounts": [{"name": "plugins-config", "mountPath": picker.config_dir, "readOnly": True}]}
    labels = component_labels(launch, COMPONENT)
    pod = {"serviceAccountName": name, "automountServiceAccountToken": True,  # it watches pods and its pool
           "enableServiceLinks": False, "terminationGracePeriodSeconds": picker.termination_grace_s,
           "securityContext": {"runAsNonRoot": True, "runAsUser": picker.uid, "runAsGroup": picker.uid,
                               "seccompProfile": dict(RUNTIME_DEFAULT)},
           "containers": [container], "volumes": [{"name": "plugins-config", "configMap": {"name": name}}]}
    skips = with_skips({}, (TAG_SKIP, TOKEN_SKIP))
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(launch, name, COMPONENT, skips),
            # the chart's: one active picker (its prefix-cache state), replaced at once
            "spec": {"replicas": 1, "strategy": dict(RECREATE), "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels, "annotations": dict(skips)}, "spec": pod}}}


def objects(launch) -> list:
    g = _facts()
    picker, name = g.picker, f"{launch.name}-{COMPONENT}"
    labels = component_labels(launch, COMPONENT)
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(launch, name, COMPONENT),
              "data": {picker.config_file: dump(picker.config)}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta(launch, name, COMPONENT),
               "spec": {"selector": labels, "ports": [
                   {"name": "grpc-ext-proc", "protocol": "TCP", "port": picker.ports["grpc"], "targetPort": "grpc",
                    "appProtocol": "http2"},
                   {"name": "http-metrics", "protocol": "TCP", "port": picker.ports["metrics"],
                    "targetPort": "metrics"}]}}
    policy = {"apiVersion": NETPOL_API, "kind": "NetworkPolicy", "metadata": meta(launch, name, COMPONENT),
              "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"],
                       "ingress": [{"ports": [{"protocol": "TCP", "port": picker.ports[p]}
                                              for p in ("grpc", "metrics")]}]}}
    return [_inference_pool(launch, g), config, *_rbac(launch, picker), _picker(launch, g), service,
            policy]
