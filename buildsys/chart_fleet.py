"""The chart's facts of a fleet (files/facts.json `fleet`; docs/fleet.md): what `plan --format k8s`
draws in front of KIMI_REPLICAS copies (render/k8s_fleet.py, render/gateway.py), read from
recipes/fleet.yaml and from a probe fleet's own rendering, never restated:

- `router`: the vllm-router Deployment of a fleet, from a probe fleet's rendering (the default recipe
  on its first hardware, two replicas): its port and metrics port (the router process's ports by
  purpose), the metrics port's name and path, its container's resource limits, its rollout
  strategy and its checkov skip; and its ServiceAccount, Role and RoleBinding as plan renders them,
  names and namespace as placeholders (`${name}`, `${namespace}`) the chart fills;
- `gateway`: KIMI_ROUTER=gateway's InferencePool facts (recipes/fleet.yaml `gateway`: its API, the
  picker's component, gRPC port and failure mode) and the endpoint picker's own objects (its
  ServiceAccount, Role and RoleBinding, plugin ConfigMap, Deployment, Service and NetworkPolicy),
  as plan renders them for a probe fleet, each name and namespace a placeholder (`${name}`,
  `${namespace}`) the chart fills: they depend on nothing else;
- `default_policy`: the router's policy when KIMI_ROUTER_POLICY is unset (recipes/fleet.yaml);
- `pd`: a PD fleet's groups (render/k8s_fleet.py pd_fleet): the variable each pool pod reads its
  group's index into and the downward API's path to the LWS label it reads it from.

The policies the router accepts and the refusals a fleet's settings meet are not here: the check Job
(`plan --format k8s --check` in the release's image) judges them.
"""

from __future__ import annotations

import json

import yaml

from entrypoint.core.compose.plan import Port
from entrypoint.core.compose.select import default_strategy
from entrypoint.core.data.recipe import with_recipe



def _rendered(launch) -> list:
    from entrypoint.render import k8s

    (text,) = k8s.render(launch).values()
    return [d for d in yaml.safe_load_all(text) if d]


def _router(launch_env, env: dict) -> dict:
    from entrypoint.core.compose.fleet import load_fleet
    from entrypoint.render import k8s_fleet

    launch = launch_env({**env, "KIMI_NAME": PROBE_NAME, "KIMI_NAMESPACE": PROBE_NAMESPACE})
    proc = launch.plan.topology.router
    name = f"{launch.name}-router"
    rendered = _rendered(launch)
    deployment = next(d for d in rendered if d["kind"] == "Deployment" and d["metadata"]["name"] == name)
    pod = deployment["spec"]["template"]["spec"]
    data = load_fleet()
    access = [d for d in rendered if d["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    return {"port": proc.port, "metrics_port": proc.ports[Port.METRICS], "metrics_port_name": k8s_fleet.METRICS_PORT_NAME,
            "metrics_path": data.metrics.path, "resources": pod["containers"][0]["resources"]["limits"],
            "strategy": deployment["spec"]["strategy"], "token_skip": k8s_fleet.TOKEN_SKIP, "objects": _placeheld(access)}


def _placeheld(objects: list) -> list:
    """`objects` with the probe's name and namespace as the chart's placeholders."""
    text = json.dumps(objects).replace(PROBE_NAMESPACE, "${namespace}").replace(PROBE_NAME, "${name}")
    return json.loads(text)


# a probe fleet's names, replaced by placeholders: neither is part of the other, nor of anything rendered
PROBE_NAME, PROBE_NAMESPACE = "probe-release-x", "probe-ns-x"


def _gateway(launch_env, env: dict) -> dict:
    from entrypoint.core.compose.fleet import load_fleet
    from entrypoint.render import gateway

    g = load_fleet().gateway
    probe = launch_env({**env, "KIMI_ROUTER": "gateway", "KIMI_NAME": PROBE_NAME, "KIMI_NAMESPACE": PROBE_NAMESPACE})
    picker = [d for d in _rendered(probe) if d["metadata"]["labels"].get("app.kubernetes.io/component") == gateway.COMPONENT]
    return {"api_version": g.api_version, "failure_mode": g.failure_mode, "component": gateway.COMPONENT,
            "port": dict(g.picker.ports), "objects": _placeheld(picker)}


def facts(launch_env, catalog) -> dict:
    """files/facts.json `fleet`; `launch_env` is buildsys/chart.py's launch of an environment."""
    from entrypoint.core.compose.fleet import load_fleet

    data = load_fleet()
    slug = catalog.serving.default_recipe
    rc = with_recipe(catalog, slug)
    hw = next(iter(rc.recipe.hardware))
    env = {"KIMI_RECIPE": slug, "KIMI_HARDWARE": hw, "KIMI_STRATEGY": default_strategy(rc, 1), "KIMI_REPLICAS": "2"}
    from entrypoint.render import k8s_fleet

    return {"router": _router(launch_env, {**env, "KIMI_ROUTER_POLICY": "round_robin"}), "gateway": _gateway(launch_env, env), "default_policy": data.default_policy,
            "pd": {"group_var": k8s_fleet.GROUP_VAR, "group_field": k8s_fleet.GROUP_FIELD}}
