"""The chart's facts of a fleet (files/facts.json `fleet`; docs/fleet.md): what `plan --format k8s`
draws in front of KIMI_REPLICAS copies (render/k8s_fleet.py, render/gateway.py), read from
recipes/fleet.yaml and from a probe fleet's own rendering, never restated:

- `router`: the vllm-router Deployment of a fleet, from a probe fleet's rendering (the default recipe
  on its first hardware, two replicas): its port and metrics port (the router process's ports by
  purpose), the metrics port's name and path, its container's resource limits, its rollout
  strategy, its Role's rule and its checkov skip;
- `gateway`: KIMI_ROUTER=gateway's InferencePool and endpoint picker (recipes/fleet.yaml `gateway`):
  the picker's image, user, arguments, ports, health service, grace period, resources and Role rules,
  its plugin configuration as the ConfigMap holds it, its checkov skips;
- `default_policy`: the router's policy when KIMI_ROUTER_POLICY is unset (recipes/fleet.yaml);
- `pd`: a PD fleet's groups (render/k8s_fleet.py pd_fleet): the variable each pool pod reads its
  group's index into and the downward API's path to the LWS label it reads it from.

The policies the router accepts and the refusals a fleet's settings meet are not here: the check Job
(`plan --format k8s --check` in the release's image) judges them.
"""

from __future__ import annotations

import yaml

from entrypoint.core.compose.plan import Port
from entrypoint.core.compose.select import default_strategy
from entrypoint.core.data.recipe import with_recipe



def _rendered(launch) -> list:
    from entrypoint.render import k8s

    (text,) = k8s.render(launch).values()
    return [d for d in yaml.safe_load_all(text) if d]


def _router(launch) -> dict:
    from entrypoint.core.compose.fleet import load_fleet
    from entrypoint.render import k8s_fleet

    proc = launch.plan.topology.router
    name = f"{launch.name}-router"
    deployment = next(d for d in _rendered(launch) if d["kind"] == "Deployment" and d["metadata"]["name"] == name)
    pod = deployment["spec"]["template"]["spec"]
    data = load_fleet()
    rule = data.discovery.rbac
    return {"port": proc.port, "metrics_port": proc.ports[Port.METRICS], "metrics_port_name": k8s_fleet.METRICS_PORT_NAME,
            "metrics_path": data.metrics.path, "resources": pod["containers"][0]["resources"]["limits"],
            "strategy": deployment["spec"]["strategy"],
            "rbac": {"apiGroups": list(rule.api_groups), "resources": list(rule.resources), "verbs": list(rule.verbs)},
            "token_skip": k8s_fleet.TOKEN_SKIP}


def _gateway() -> dict:
    from entrypoint.core.compose.fleet import load_fleet
    from entrypoint.render import gateway
    from entrypoint.render.yamltext import dump

    g = load_fleet().gateway
    p = g.picker
    return {"api_version": g.api_version, "group": g.api_version.split("/", 1)[0], "failure_mode": g.failure_mode,
            "component": gateway.COMPONENT, "image": p.image, "uid": p.uid, "args": list(p.args),
            "pool_args": dict(p.pool_args), "config_flag": p.config_flag, "config_dir": p.config_dir,
            "config_file": p.config_file, "config": dump(p.config),
            "ports": [[name, number] for name, number in p.ports.items()], "port": dict(p.ports),
            "health_service": p.health_service, "termination_grace_s": p.termination_grace_s,
            "resources": {"cpu": str(p.resources["cpu"]), "memory": f"{p.resources['memory_gib']}Gi"},
            "rbac": [{"apiGroups": list(r.api_groups), "resources": list(r.resources), "verbs": list(r.verbs)}
                     for r in p.rbac],
            "skips": {"tag": gateway.TAG_SKIP, "token": gateway.TOKEN_SKIP}}


def facts(launch_env, catalog) -> dict:
    """files/facts.json `fleet`; `launch_env` is buildsys/chart.py's launch of an environment."""
    from entrypoint.core.compose.fleet import load_fleet

    data = load_fleet()
    slug = catalog.serving.default_recipe
    rc = with_recipe(catalog, slug)
    hw = next(iter(rc.recipe.hardware))
    probe = launch_env({"KIMI_RECIPE": slug, "KIMI_HARDWARE": hw, "KIMI_STRATEGY": default_strategy(rc, 1),
                        "KIMI_REPLICAS": "2", "KIMI_ROUTER_POLICY": "round_robin"})
    from entrypoint.render import k8s_fleet

    return {"router": _router(probe), "gateway": _gateway(), "default_policy": data.default_policy,
            "pd": {"group_var": k8s_fleet.GROUP_VAR, "group_field": k8s_fleet.GROUP_FIELD}}
