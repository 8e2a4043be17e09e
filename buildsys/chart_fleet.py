"""The chart's facts of a fleet (files/facts.json `fleet`; docs/fleet.md): what `plan --format k8s`
draws in front of KIMI_REPLICAS copies (render/k8s_fleet.py, render/gateway.py) and what it refuses,
read from recipes/fleet.yaml and from real launches, never restated:

- `router`: the vllm-router Deployment of a fleet, from a probe fleet's own rendering: its port and
  metrics port (the router process's ports by purpose), its pod's resources and security context,
  its rollout, the metrics port's name and path, its Role's rule and its checkov skip;
- `gateway`: KIMI_ROUTER=gateway's InferencePool and endpoint picker (recipes/fleet.yaml `gateway`),
  the picker's plugin configuration as the ConfigMap holds it, its checkov skips;
- `policies`, `default_policy`, the vLLM grammars that serve the token-id policies' render
  endpoints (`token_ids_versions`; the newest grammar not newer than a version judges it, as
  core/vllm_cli.spec_for does), `default_vllm_version`;
- `pd`: a PD fleet's groups (render/k8s_fleet.py pd_fleet): the variable each pool pod reads its
  group's index into and the downward API's path to the LWS label it reads it from;
- `refused`: plan's own refusal messages (indices into `kv.messages`, or printf templates where plan
  names a value: `%s` a vLLM version, a policy or a strategy), probed with the settings the chart
  fails on.
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
