"""The chart's fleet (docs/fleet.md, issue 31) through the real helm: the router pod it draws starts,
as `kimi-serve` resolves it from the pod's own environment, a real vllm-router argv (its own parser)
that discovers exactly the copies' API pods the chart draws, on their port, in the release's
namespace, behind the API Service; a PD fleet's router pod discovers every unit's API pods of both
pools on their one port, each group with its own pool addresses; the Gateway's InferencePool selects
them and names its picker; and what plan refuses in a fleet, the chart refuses with plan's own
message and its way out."""

from __future__ import annotations


import pytest

from entrypoint.app.launch import build, with_peers
from entrypoint.core.base.errors import KimiError
from tests.chart.helm import RELEASE, RELEASE_NAMESPACE, chart_refusal, release_template
from tests.chart.test_chart import plan_objects
from tests.deploy.shapes import container_environ
from tests.vllm_contract.test_router import needs_router, parse_router_args

LWS_NAME, LWS_INDEX = "leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/worker-index"
MULTI = {"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2}


def _kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _api_pods(engine: dict) -> tuple:
    """The labels and the API port of the pods that serve a copy's API (a group's leader for LWS)."""
    if engine["kind"] == "Deployment":
        template = engine["spec"]["template"]
        return template["metadata"]["labels"], template["spec"]["containers"][0]["ports"][0]["containerPort"]
    template = engine["spec"]["leaderWorkerTemplate"].get("leaderTemplate") or engine["spec"]["leaderWorkerTemplate"][
        "workerTemplate"]
    labels = {LWS_NAME: engine["metadata"]["name"], LWS_INDEX: "0"}  # what LWS labels a group's leader with
    return labels, template["spec"]["containers"][0]["ports"][0]["containerPort"]


@needs_router
@pytest.mark.parametrize("settings, replicas", [
    ({"hardware": "h200"}, 3),
    ({"hardware": "h200", "port": 9000, "router_policy": "consistent_hash", "namespace": "llm"}, 2),
    ({**MULTI, "router_policy": "power_of_two", "router_port": 8088}, 2),
    ({"recipe": "kimi-k3", "hardware": "h200", "strategy": "multi_node_tp_dp", "nodes": 2}, 2)])
def test_the_charts_router_pod_starts_the_real_router_before_the_charts_copies(helm, tmp_path, settings, replicas):
    objects = release_template(helm, {"settings": settings, "replicas": replicas}, tmp_path)
    deployments = _kind(objects, "Deployment")
    router = deployments[f"{RELEASE}-router"]
    container = router["spec"]["template"]["spec"]["containers"][0]
    # the router pod's own start: its container's environment, as kimi-serve resolves it there
    proc = build(container_environ(objects, container)).this_process()
    assert proc.role == "router"
    args = parse_router_args(list(proc.router_argv[1:]))  # the real vllm-router's parser
    assert args.policy == settings.get("router_policy", "cache_aware")
    namespace = settings.get("namespace", RELEASE_NAMESPACE)
    assert args.service_discovery and args.service_discovery_namespace == namespace
    (engine,) = [o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet") and o is not router]
    assert engine["spec"]["replicas"] == replicas
    labels, port = _api_pods(engine)
    assert args.selector and all(labels.get(k) == v for k, v in args.selector.items())
    assert args.service_discovery_port == port
    # the API Service and its port: the router's, on its own pod's port
    service = _kind(objects, "Service")[f"{RELEASE}-api"]
    assert service["spec"]["selector"] == router["spec"]["selector"]["matchLabels"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert service["spec"]["ports"][0]["port"] == proc.port == ports["http"]  # the stream front's (issue 48)
    assert args.port == proc.front.router_port  # the router behind it
    assert args.prometheus_port == ports["metrics"] and args.prometheus_host == "0.0.0.0"
    # its ServiceAccount may list and watch the copies' pods, in its namespace only
    pod = router["spec"]["template"]["spec"]
    role, binding = _kind(objects, "Role")[pod["serviceAccountName"]], _kind(objects, "RoleBinding")[pod["serviceAccountName"]]
    assert pod["automountServiceAccountToken"] and binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": namespace}]
    assert role["metadata"]["namespace"] == namespace and {"list", "watch"} <= set(role["rules"][0]["verbs"])


@pytest.mark.parametrize("settings", [{"hardware": "h200", "router": "gateway"}, {**MULTI, "router": "gateway"}])
def test_the_charts_inference_pool_selects_the_charts_copies_and_names_its_picker(helm, tmp_path, settings):
    objects = release_template(helm, {"settings": settings, "replicas": 2}, tmp_path)
    assert f"{RELEASE}-router" not in _kind(objects, "Deployment")  # no router of our own
    (pool,) = _kind(objects, "InferencePool").values()
    (engine,) = [o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet")
                 and o["metadata"]["labels"]["app.kubernetes.io/component"] != "epp"]
    labels, port = _api_pods(engine)
    assert all(labels.get(k) == v for k, v in pool["spec"]["selector"]["matchLabels"].items())
    assert pool["spec"]["targetPorts"] == [{"number": port}]
    ref = pool["spec"]["endpointPickerRef"]
    picker, service = _kind(objects, "Deployment")[ref["name"]], _kind(objects, "Service")[ref["name"]]
    assert ref["port"]["number"] in [p["port"] for p in service["spec"]["ports"]]
    assert service["spec"]["selector"] == picker["spec"]["selector"]["matchLabels"]
    args = picker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pool-name") + 1] == pool["metadata"]["name"]
    assert args[args.index("--pool-namespace") + 1] == pool["metadata"]["namespace"] == RELEASE_NAMESPACE
    # the API Service fronts the copies themselves (the Gateway routes through the pool)
    assert _kind(objects, "Service")[f"{RELEASE}-api"]["spec"]["selector"] == pool["spec"]["selector"]["matchLabels"]


PD = {"hardware": "h200", "strategy": "pd_cluster"}
# what plan refuses in a fleet (docs/fleet.md "What is refused"), with the words of its way out
REFUSED = {
    "pd-units-gateway": ({**PD, "router": "gateway"}, 3, "KIMI_ROUTER=vllm-router"),
    "pd-gateway": ({**PD, "router": "gateway", "router_policy": "round_robin"}, 1, "KIMI_ROUTER=vllm-router"),
    "kv-store": ({"hardware": "h200", "kv_offload": "kv_store_centralized_mooncake"}, 2, "KIMI_KV_INSTANCES"),
    "kv-store-pd": ({**PD, "kv_offload": "kv_store_centralized_mooncake", "router_policy": "round_robin"}, 1,
                    "KIMI_PREFILL_NODES"),
    "kv-store-pd-units": ({**PD, "kv_offload": "kv_store_distributed_mooncake"}, 2, "KIMI_AUTOSCALING=off"),
    "pd-units-no-router": ({**PD, "router": "none"}, 2, "KIMI_ROUTER=vllm-router"),
    "pd-router-port-is-metrics-port": ({**PD, "router_port": 29000}, 2, "KIMI_ROUTER_PORT"),
    "power-of-two-alone": ({"hardware": "h200", "router_policy": "power_of_two"}, 1, "KIMI_REPLICAS=2"),
    "kv-aware-single": ({"hardware": "h200", "router_policy": "kv_aware"}, 2, "KIMI_REPLICA_ADDRS"),
    "kv-aware-gateway": ({"hardware": "h200", "router_policy": "kv_aware", "router": "gateway"}, 2, "cache_aware"),
    "kv-aware-multi": ({**MULTI, "router_policy": "kv_aware"}, 2, "KIMI_STRATEGY=multi_node_tp spreads"),
    "kv-aware-pd": ({**PD, "router_policy": "kv_aware"}, 1, "KIMI_STRATEGY=pd_cluster spreads"),
    "token-ids-0.19.1": ({"hardware": "h200", "vllm_version": "0.19.1"}, 2, "KIMI_ROUTER_POLICY=round_robin"),
    # an unrecorded release is judged by the newest grammar not newer than it (0.19.1's)
    "token-ids-0.30.0": ({"hardware": "h200", "vllm_version": "0.30.0"}, 2, "vLLM 0.30.0 has no"),
    "hosts-on-kubernetes": ({"hardware": "h200", "replica_addrs": ["a", "b"]}, 2, "Unset KIMI_REPLICA_ADDRS"),
    "unknown-policy": ({"hardware": "h200", "router_policy": "fastest"}, 2, "Unset it for the default"),
    "router-port-is-metrics-port": ({"hardware": "h200", "router_port": 29000}, 2, "KIMI_ROUTER_PORT"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_chart_refuses_what_plan_refuses_in_a_fleet_with_plans_words(helm, tmp_path, case):
    settings, replicas, way_out = REFUSED[case]
    with pytest.raises(KimiError) as err:
        plan_objects(settings, {"KIMI_REPLICAS": str(replicas)}, tmp_path)
    assert way_out in err.value.message
    refusal = chart_refusal(helm, {"settings": settings, "replicas": replicas}, tmp_path, "-n", RELEASE_NAMESPACE,
                            release=RELEASE)
    assert refusal is not None and err.value.message in refusal, refusal


# a PD fleet (render/k8s_fleet.py pd_fleet; docs/fleet.md): each pool's LeaderWorkerSet a group per unit,
# each group its own pool addresses, the PD router discovering every group's API pods of both pools
PD_FLEETS = {
    "pd-x2": ({**PD}, {"replicas": 2}),
    "pd-tp-x3-monitored": ({**PD, "prefill_nodes": 2, "decode_nodes": 1, "prefill_parallelism": "tp",
                            "router_policy": "round_robin"}, {"replicas": 3, "monitoring": {"enabled": True}}),
    # one unit an autoscaler scales: each group it adds is a unit of its own, which the router discovers
    "pd-x1-autoscaled": ({**PD}, {"autoscaling": {"enabled": True, "engine": "keda"}}),
}


@needs_router
@pytest.mark.parametrize("case", sorted(PD_FLEETS))
def test_the_charts_pd_router_pod_discovers_exactly_every_units_api_pods(helm, tmp_path, case):
    # LeaderWorkerSet's own names (the API of leaderworkerset.x-k8s.io/v1, its pods' group label), as its
    # documentation gives them: written here, not read from the renderer under test
    group_var, group_label = "LWS_GROUP_INDEX", "leaderworkerset.sigs.k8s.io/group-index"
    from tests.edges.test_repros_27 import kubelet_expand
    from tests.vllm_contract.test_pd_fleet_router import _matches, _pods, _router_args

    settings, values = PD_FLEETS[case]
    objects = release_template(helm, {"settings": settings, **values}, tmp_path)
    sets = _kind(objects, "LeaderWorkerSet")
    units = values.get("replicas", 1)
    assert sorted(sets) == [f"{RELEASE}-decode", f"{RELEASE}-prefill"]
    assert all(lws["spec"]["replicas"] == units for lws in sets.values())
    # the router pod's own start (its environment, through kimi-serve), parsed by the real vllm-router
    _argv, args = _router_args(objects)
    assert args.vllm_pd_disaggregation and args.service_discovery
    assert args.service_discovery_namespace == RELEASE_NAMESPACE
    assert not args.prefill_urls and not args.decode_urls  # no static unit: discovery finds them all
    assert args.prefill_policy == settings.get("router_policy", "cache_aware")
    groups = units + 1  # and the group an autoscaler (or a larger `replicas`) adds next
    pods = _pods(objects, groups)
    for role, selector in (("prefill", args.prefill_selector), ("decode", args.decode_selector)):
        found = [p for p in pods if _matches(selector, p["labels"])]
        assert found == [p for p in pods if p["role"] == role and p["port"] is not None], role
        assert {p["port"] for p in found} == {args.service_discovery_port}  # one port, both pools
    # each group's pods: their own group's pool addresses (the downward API's label, the kubelet's expansion)
    for name, lws in sets.items():
        size = lws["spec"]["leaderWorkerTemplate"]["size"]
        container = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        for group in range(groups):
            defined: dict = {}
            for item in container["env"]:
                if "configMapKeyRef" in item.get("valueFrom", {}):  # the user's settings
                    defined[item["name"]] = container_environ(objects, {"env": [item]})[item["name"]]
                elif "valueFrom" in item:
                    assert item["name"] == group_var and item["valueFrom"]["fieldRef"]["fieldPath"] == \
                        f"metadata.labels['{group_label}']"
                    defined[item["name"]] = str(group)
                else:
                    defined[item["name"]] = kubelet_expand(item["value"], defined)
            own = [f"{name}-{group}.{name}"] + [f"{name}-{group}-{i}.{name}" for i in range(1, size)]
            key = f"KIMI_{name.rsplit('-', 1)[1].upper()}_ADDRS"
            assert key not in defined and with_peers(defined)[key].split(",") == own  # the pod's start names them
    # the router: its ServiceAccount may list and watch the pods; the API Service in front of it
    router = _kind(objects, "Deployment")[f"{RELEASE}-router"]
    pod = router["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] and pod["serviceAccountName"] in _kind(objects, "Role")
    assert router["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    service = _kind(objects, "Service")[f"{RELEASE}-api"]
    assert service["spec"]["selector"] == router["spec"]["selector"]["matchLabels"]
    env = container_environ(objects, router["spec"]["template"]["spec"]["containers"][0])
    proc = build(env).this_process()  # the stream front before the router (issue 48)
    assert service["spec"]["ports"][0]["port"] == proc.port and args.port == proc.front.router_port
    if values.get("monitoring"):
        monitor = _kind(objects, "PodMonitor")[f"{RELEASE}-router"]
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
        ports = {p["name"]: p["containerPort"] for p in pod["containers"][0]["ports"]}
        assert args.prometheus_port == ports["metrics"]


@pytest.mark.parametrize("values", [{"replicas": 2}, {"autoscaling": {"enabled": True, "engine": "hpa"}}])
def test_pd_units_behind_no_router_are_refused_with_plans_words(helm, tmp_path, values):
    """settings.router: none with PD units (copies, or the groups an autoscaler adds): only the router
    pairs a unit's pools, so plan refuses it, and the chart with plan's message."""
    env = {"KIMI_ROUTER": "none", **({"KIMI_REPLICAS": "2"} if "replicas" in values else {"KIMI_AUTOSCALING": "hpa"})}
    with pytest.raises(KimiError) as err:
        plan_objects(PD, env, tmp_path)
    assert "KIMI_ROUTER=vllm-router" in err.value.message
    refusal = chart_refusal(helm, {"settings": {**PD, "router": "none"}, **values}, tmp_path, "-n", RELEASE_NAMESPACE,
                            release=RELEASE)
    assert refusal is not None and err.value.message in refusal, refusal


@pytest.mark.parametrize("settings, replicas", [({"hardware": "h200", "router": "none"}, 2),
                                                ({"hardware": "h200", "router_policy": "round_robin"}, 1)])
def test_a_router_is_drawn_unless_the_copies_are_behind_the_plain_service(helm, tmp_path, settings, replicas):
    """settings.router: none: the copies behind the plain Service, as before (no RBAC); one copy with a
    policy: a fleet of one behind the router, as plan draws it."""
    objects = release_template(helm, {"settings": settings, "replicas": replicas}, tmp_path)
    has_router = f"{RELEASE}-router" in _kind(objects, "Deployment")
    assert has_router == (settings.get("router") != "none")
    assert bool(_kind(objects, "Role")) == has_router
    (engine,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == RELEASE]
    assert engine["spec"]["replicas"] == replicas
