"""The chart's facts of a fleet (files/facts.json `fleet`; docs/fleet.md): what `plan --format k8s`
draws in front of KIMI_REPLICAS copies (render/k8s_fleet.py, render/gateway.py), read from
recipes/fleet.yaml and from a probe fleet's own rendering, never restated:

- `router`: the vllm-router Deployment of a fleet, from a probe fleet's rendering (the default recipe
  on its first hardware, two replicas): its port and metrics port (the router process's ports by
  purpose), the metrics port's name, its container's resource limits, its rollout strategy and its
  checkov skip; its ServiceAccount, Role and RoleBinding as plan renders them, names and namespace
  as placeholders (`${name}`, `${namespace}`) the chart fills; and with monitoring its PodMonitor and
  metrics NetworkPolicy, the scraper a placeholder too (buildsys/chart_copy.py);
- `gateway`: KIMI_ROUTER=gateway's InferencePool and its endpoint picker's own objects (its
  ServiceAccount, Role and RoleBinding, plugin ConfigMap, Deployment, Service and NetworkPolicy),
  as plan renders them for a probe fleet, each name and namespace a placeholder (`${name}`,
  `${namespace}`) the chart fills, and the pool's pods and port (`pool`, `port`);
- `pd`: a PD fleet's groups (render/k8s_fleet.py pd_fleet): the variable each pool pod reads its
  group's index into and the downward API's path to the LWS label it reads it from.

The policies the router accepts and the refusals a fleet's settings meet are not here: the check Job
(`plan --format k8s --check` in the release's image) judges them.
"""

from __future__ import annotations

from buildsys.chart_copy import OTHER_NAME, OTHER_NAMESPACE, PROBE_NAME, PROBE_NAMESPACE, placeheld, probe, proven
from buildsys.chart_copy import probe_env as env_of
from buildsys.chart_copy import rendered as _rendered
from entrypoint.core.compose.plan import Port
from entrypoint.core.compose.select import default_strategy
from entrypoint.core.data.recipe import with_recipe

NAMES = {"name": PROBE_NAME, "namespace": PROBE_NAMESPACE}  # the chart's ${name} and ${namespace}
OTHER = {"name": OTHER_NAME, "namespace": OTHER_NAMESPACE}


def _router(launch_env, env: dict) -> dict:
    from entrypoint.render import k8s_fleet

    launch = probe(launch_env, env, PROBE_NAME, PROBE_NAMESPACE)
    proc = launch.plan.topology.router
    name = f"{launch.name}-router"
    rendered = _rendered(launch)
    deployment = next(d for d in rendered if d["kind"] == "Deployment" and d["metadata"]["name"] == name)
    pod = deployment["spec"]["template"]["spec"]
    access = [d for d in rendered if d["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    return {"port": proc.port, "metrics_port": proc.ports[Port.METRICS], "metrics_port_name": k8s_fleet.METRICS_PORT_NAME,
            "resources": pod["containers"][0]["resources"]["limits"], "strategy": deployment["spec"]["strategy"],
            "token_skip": k8s_fleet.TOKEN_SKIP, "objects": placeheld(access, NAMES), "monitoring": _router_monitoring(launch_env, env)}


def _router_monitoring(launch_env, env: dict) -> list:
    """The router's PodMonitor and metrics NetworkPolicy (k8s_fleet.monitoring_objects), with the release's
    names and `scraper` (the `from` peer of the chart's monitoring.scraper) as placeholders."""
    from entrypoint.render import k8s_fleet, k8s_objects

    copies = []
    for names, scraper in ((NAMES, {}), (OTHER, {"scraper_namespace": "prom-y", "scraper_labels": "app=prom-y"})):
        launch = probe(launch_env, env, names["name"], names["namespace"], monitoring=1, **scraper)
        copies.append((k8s_fleet.monitoring_objects(launch), {**names, "scraper": k8s_objects.scraper(launch)}))
    return proven(*copies[0], *copies[1])


def _gateway(launch_env, env: dict, multi: dict) -> dict:
    """The InferencePool and its endpoint picker's objects, a single-node probe's proven by a multi-node
    probe's: the release's names, the pool's `pool` (its pods' labels) and `port` as placeholders."""
    from entrypoint.render import gateway

    copies = []
    for probe_env, names, more in ((env, NAMES, {}), (multi, OTHER, {"port": 9123})):
        launch = probe(launch_env, probe_env, names["name"], names["namespace"], router="gateway", **more)
        drawn = [d for d in _rendered(launch) if d["metadata"]["labels"].get("app.kubernetes.io/component") in (gateway.COMPONENT, "pool")]
        copies.append((drawn, {**names, "pool": gateway.pool_selector(launch), "port": gateway.api_port(launch)}))
    return {"objects": proven(*copies[0], *copies[1])}


def _discovery(launch_env, env: dict, multi: dict) -> dict:
    """The copies' API pods (render/fleet.selector): per shape the router's discovery selector
    (KIMI_ROUTER_SELECTOR) and the Gateway pool's labels, single-node and multi-node probes'; per PD pool
    its terms, the pool's and (where its workers serve no API) its leaders', from a PD fleet's selection
    of two pools of two; the release's name as `${name}`, proven by the same probes named otherwise."""
    from types import SimpleNamespace

    from entrypoint.render import fleet, gateway, k8s_objects

    labels = (k8s_objects.LWS_NAME_LABEL, k8s_objects.LWS_INDEX_LABEL)
    headless = {role: SimpleNamespace(name=role, serving_nodes=1, node_count=2) for role in ("prefill", "decode")}
    pd = SimpleNamespace(prefill=headless["prefill"], pd_pools=headless, is_multi_node=False)
    copies = []
    for names in (NAMES, OTHER):
        found: dict = {"selector": {}, "pool": {}}
        for shape, probe_env in (("single", env), ("multi_node", multi)):
            launch = probe(launch_env, probe_env, names["name"], names["namespace"])
            found["selector"][shape] = ",".join(fleet.selector(launch.name, launch.selection, labels))
            found["pool"][shape] = gateway.pool_selector(launch)
        found["selector"]["pd_cluster"] = {role: [t for t in fleet.selector(names["name"], pd, labels) if t.startswith(f"{role}:")]
                                           for role in headless}
        copies.append((found, {"name": names["name"]}))
    return proven(*copies[0], *copies[1])


def facts(launch_env, catalog) -> dict:
    """files/facts.json `fleet`; `launch_env` is buildsys/chart.py's launch of an environment."""

    slug = catalog.serving.default_recipe
    rc = with_recipe(catalog, slug)
    hw = next(iter(rc.recipe.hardware))
    env = env_of(slug, hw, default_strategy(rc, 1), replicas=2)
    multi = {**env, "KIMI_STRATEGY": default_strategy(rc, 2), "KIMI_NODES": "2"}
    from entrypoint.core.compose import fleet
    from entrypoint.render import k8s_fleet

    return {"router": _router(launch_env, {**env, "KIMI_ROUTER_POLICY": "round_robin"}), "gateway": _gateway(launch_env, env, multi),
            "discovery": _discovery(launch_env, env, multi),
            "asked_by": {"set": list(fleet.FLEET_SETTINGS), "values": dict(fleet.FLEET_VALUES)},
            "pd": {"group_var": k8s_fleet.GROUP_VAR, "group_field": k8s_fleet.GROUP_FIELD}}
