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

from entrypoint.core.errors import KimiError
from entrypoint.core.plan import Port
from entrypoint.core.recipe import with_recipe
from entrypoint.core.select import default_strategy, offered_strategies



def _rendered(launch) -> list:
    from entrypoint.render import k8s

    (text,) = k8s.render(launch).values()
    return [d for d in yaml.safe_load_all(text) if d]


def _template(launch_env, env: dict, named: dict) -> str:
    """plan's refusal message for `env` as a printf template: each of `named`'s values -> its verb."""
    try:
        launch_env(env)
    except KimiError as exc:
        text = exc.message.replace("%", "%%")
        for value, verb in named.items():
            assert value in text, (env, exc.message)
            text = text.replace(value, verb)
        return text
    raise AssertionError(f"plan renders {env}, which the chart refuses")


def _router(launch) -> dict:
    from entrypoint.core.fleet import load_fleet, router_of
    from entrypoint.render import k8s_fleet

    proc = router_of(launch.plan)
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
    from entrypoint.core.fleet import load_fleet
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


def _versions(data) -> dict:
    """Each recorded vLLM grammar -> whether it has the flags the token-id policies add."""
    from entrypoint.core.vllm_cli import available_versions, spec_for

    flags = [a for a in data.token_ids_args if a.startswith("--")]
    return {v: all(spec_for(v).lookup(f)[0] is not None for f in flags) for v in available_versions()}


def _refused(launch_env, verdict, catalog, messages: list, data) -> dict:
    from entrypoint.core.kv import load_kv

    def refusal(env: dict) -> int:
        index = verdict(env, messages)
        assert index is not None, f"plan renders {env}, which the chart refuses"
        return index

    slug = catalog.serving.default_recipe
    rc = with_recipe(catalog, slug)
    hw = next(h for h in rc.recipe.hardware if "pd_cluster" in offered_strategies(rc, h))
    single = {"KIMI_RECIPE": slug, "KIMI_HARDWARE": hw, "KIMI_STRATEGY": default_strategy(rc, 1)}
    pd = {**single, "KIMI_STRATEGY": "pd_cluster"}
    two = {**single, "KIMI_REPLICAS": "2"}
    kv_events = [p for p, v in data.policies.items() if v.kv_events]
    token_ids = [p for p, v in data.policies.items() if v.token_ids]
    old = next((v for v, ok in _versions(data).items() if not ok), None)
    return {
        "unknown_policy": _template(launch_env, {**two, "KIMI_ROUTER_POLICY": "probe37"}, {"probe37": "%s"}),
        "replica_addrs": refusal({**single, "KIMI_REPLICA_ADDRS": "a,b"}),
        "kv_store": {kid: refusal({**two, "KIMI_KV_OFFLOAD": kid}) for kid in load_kv().stores},
        "kv_store_pd": {kid: refusal({**pd, "KIMI_REPLICAS": "2", "KIMI_KV_OFFLOAD": kid}) for kid in load_kv().stores},
        "min_replicas": {p: {str(n): refusal({**single, "KIMI_ROUTER_POLICY": p, "KIMI_REPLICAS": str(n)})
                             for n in range(1, v.min_replicas)}
                         for p, v in data.policies.items() if v.min_replicas > 1},
        "gateway_pd": refusal({**pd, "KIMI_ROUTER": "gateway", "KIMI_ROUTER_POLICY": "round_robin"}),
        # the recipe's floor aside, an unrecorded release below the token-id flags' first one
        "token_ids": {p: _template(launch_env, {**two, "KIMI_ROUTER_POLICY": p, "KIMI_VLLM_VERSION": old},
                                   {f"vLLM {old} ": "vLLM %s "}) for p in token_ids} if old else {},
        "kv_events": {p: {"spread": _template(launch_env, {**pd, "KIMI_ROUTER_POLICY": p},
                                              {"KIMI_STRATEGY=pd_cluster": "KIMI_STRATEGY=%s"}),
                          "discovered": refusal({**two, "KIMI_ROUTER_POLICY": p})}
                      for p in kv_events},
        "metrics_port": refusal({**two, "KIMI_ROUTER_PORT": str(data.metrics.port)}),
        "pd_metrics_port": refusal({**pd, "KIMI_REPLICAS": "2", "KIMI_ROUTER_PORT": str(data.metrics.port)}),
        "pd_router_none": refusal({**pd, "KIMI_REPLICAS": "2", "KIMI_ROUTER": "none"}),
    }


def facts(launch_env, verdict, catalog, messages: list) -> dict:
    """files/facts.json `fleet`; `launch_env` and `verdict` are buildsys/chart.py's launch of an
    environment and plan's verdict on it (its message's index in `messages`, None where it renders)."""
    from entrypoint.core.fleet import load_fleet
    from entrypoint.core.vllm_cli import newest_version

    data = load_fleet()
    slug = catalog.serving.default_recipe
    rc = with_recipe(catalog, slug)
    hw = next(iter(rc.recipe.hardware))
    probe = launch_env({"KIMI_RECIPE": slug, "KIMI_HARDWARE": hw, "KIMI_STRATEGY": default_strategy(rc, 1),
                        "KIMI_REPLICAS": "2", "KIMI_ROUTER_POLICY": "round_robin"})
    from entrypoint.render import k8s_fleet

    return {"router": _router(probe), "gateway": _gateway(), "default_policy": data.default_policy,
            "pd": {"group_var": k8s_fleet.GROUP_VAR, "group_field": k8s_fleet.GROUP_FIELD},
            "policies": {p: {"min_replicas": v.min_replicas, "token_ids": bool(v.token_ids),
                             "kv_events": bool(v.kv_events)} for p, v in data.policies.items()},
            "token_ids_versions": _versions(data), "default_vllm_version": newest_version(),
            "refused": _refused(launch_env, verdict, catalog, messages, data)}
