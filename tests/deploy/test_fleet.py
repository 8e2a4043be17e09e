"""A fleet (KIMI_REPLICAS copies behind one router; core/compose/fleet.py, render/k8s_fleet.py, render/gateway.py,
docs/fleet.md): one copy renders as before, every fleet object validates against Kubernetes' schemas
and the CRDs (the Gateway API Inference Extension's InferencePool among them), the objects point at
each other, Compose runs the router before the copies' addresses, and what cannot work is refused
with exit code 2 and a way out."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
import yaml

from entrypoint.app.launch import build, with_peers
from entrypoint.core.base.errors import KimiError
from tests.deploy.k8s_schema import validate
from entrypoint.core.compose.settings import read_settings
from tests.deploy.shapes import COMPOSE, K8S, container_environ, documents, launch_for, render
from tests.testdata import COMPOSE_SPEC

H200 = {"KIMI_HARDWARE": "h200"}
MULTI = {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2"}
PD = {**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": "p0", "KIMI_DECODE_ADDRS": "d0"}
FLEETS = {
    "single-x3": {**H200, "KIMI_REPLICAS": "3"},
    "single-x2-operated": {**H200, "KIMI_REPLICAS": "2", "KIMI_MONITORING": "1", "KIMI_AUTOSCALING": "keda"},
    "multi-x2-hpa": {**MULTI, "KIMI_REPLICAS": "2", "KIMI_AUTOSCALING": "hpa", "KIMI_ROUTER_POLICY": "round_robin"},
    "single-x2-lmcache": {**H200, "KIMI_REPLICAS": "2", "KIMI_KV_OFFLOAD": "lmcache"},
    "gateway-single-x2": {**H200, "KIMI_REPLICAS": "2", "KIMI_ROUTER": "gateway"},
    "gateway-multi-x2-keda": {**MULTI, "KIMI_REPLICAS": "2", "KIMI_ROUTER": "gateway", "KIMI_AUTOSCALING": "keda"},
    # PD units: each pool's LeaderWorkerSet a group per unit, the PD router discovering every group
    "pd-x2-operated": {**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "2", "KIMI_MONITORING": "1",
                       "KIMI_AUTOSCALING": "keda"},
    "pd-tp-x3-hpa": {**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "3", "KIMI_PREFILL_NODES": "2",
                     "KIMI_PREFILL_PARALLELISM": "tp", "KIMI_DECODE_PARALLELISM": "tp", "KIMI_AUTOSCALING": "hpa"},
    # one unit an autoscaler scales: a PD fleet too, each group it adds a unit the router discovers
    "pd-x1-autoscaled": {**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "1", "KIMI_AUTOSCALING": "keda"},
}


def _by(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.parametrize("case", sorted(K8S))
def test_one_copy_renders_as_before(case):
    env = K8S[case]
    assert render("k8s", {**env, "KIMI_REPLICAS": "1"}) == render("k8s", env)
    assert launch_for("k8s", {**env, "KIMI_REPLICAS": "1", "KIMI_ROUTER": "gateway"}).plan == launch_for("k8s", env).plan


@pytest.mark.parametrize("case", sorted(COMPOSE))
def test_one_copy_composes_as_before(case):
    assert render("compose", {**COMPOSE[case], "KIMI_REPLICAS": "1"}) == render("compose", COMPOSE[case])


@pytest.mark.parametrize("case", sorted(FLEETS))
def test_every_fleet_object_validates(case):
    docs = documents("k8s", FLEETS[case])
    for doc in docs:
        validate(doc)
    engines = [d for d in docs if d["kind"] in ("Deployment", "LeaderWorkerSet")
               and d["metadata"]["labels"]["app.kubernetes.io/component"] not in ("router", "epp")]
    pools = 2 if FLEETS[case].get("KIMI_STRATEGY") == "pd_cluster" else 1  # a PD unit: a group of each pool
    assert [d["spec"]["replicas"] for d in engines] == [int(FLEETS[case]["KIMI_REPLICAS"])] * pools
    # an autoscaler scales the copies only (a PD fleet: each pool), never the router nor the picker
    scalers = [d for d in docs if d["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")]
    assert [s["spec"]["scaleTargetRef"]["name"] for s in scalers] == (
        [e["metadata"]["name"] for e in engines] if "KIMI_AUTOSCALING" in FLEETS[case] else [])


def test_kubernetes_fleet_fronts_the_copies_with_the_router():
    docs = documents("k8s", FLEETS["single-x2-operated"])
    router = _by(docs, "Deployment")["kimi-k2-5-router"]
    engine = _by(docs, "Deployment")["kimi-k2-5"]
    api = _by(docs, "Service")["kimi-k2-5-api"]
    assert api["spec"]["selector"] == router["spec"]["selector"]["matchLabels"]
    assert api["spec"]["selector"] != engine["spec"]["selector"]["matchLabels"]
    # the API port from anywhere reaches the router only; the engines take any port from the deployment's pods
    policy = _by(docs, "NetworkPolicy")["kimi-k2-5-api"]
    assert policy["spec"]["podSelector"]["matchLabels"] == api["spec"]["selector"]
    # its metrics: a PodMonitor on the router's metrics port, admitted by a policy of its own
    container = router["spec"]["template"]["spec"]["containers"][0]
    metrics = next(p for p in container["ports"] if p["name"] == "metrics")
    monitor = _by(docs, "PodMonitor")["kimi-k2-5-router"]
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"] == router["spec"]["template"]["metadata"]["labels"]
    (allowed,) = _by(docs, "NetworkPolicy")["kimi-k2-5-router-metrics"]["spec"]["ingress"]
    assert allowed["ports"] == [{"protocol": "TCP", "port": metrics["containerPort"]}]
    # from the scraper only, as the engines' metrics ports
    assert allowed["from"] == _by(docs, "NetworkPolicy")["kimi-k2-5-metrics"]["spec"]["ingress"][0]["from"]
    # the autoscaler's queue is the fleet's: every copy's waiting requests, averaged per copy
    (scaled,) = _by(docs, "ScaledObject").values()
    waiting = next(t for t in scaled["spec"]["triggers"] if t["name"] == "waiting")
    assert waiting["metricType"] == "AverageValue" and waiting["metadata"]["query"].startswith("sum(")
    assert "pod=" not in waiting["metadata"]["query"]


@pytest.mark.parametrize("case", ["gateway-single-x2", "gateway-multi-x2-keda"])
def test_the_inference_pool_selects_the_copies_and_names_its_picker(case):
    docs = documents("k8s", FLEETS[case])
    assert not any(d["metadata"]["name"].endswith("-router") for d in docs)  # no router of our own
    (pool,) = _by(docs, "InferencePool").values()
    engine = next(d for d in docs if d["kind"] in ("Deployment", "LeaderWorkerSet")
                  and d["metadata"]["labels"]["app.kubernetes.io/component"] not in ("epp",))
    if engine["kind"] == "Deployment":
        template = engine["spec"]["template"]
        labels = template["metadata"]["labels"]
    else:  # the leader of each group: LWS labels its pods with the set's name and the worker index 0
        template = engine["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
        labels = {"leaderworkerset.sigs.k8s.io/name": engine["metadata"]["name"],
                  "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    assert all(labels.get(k) == v for k, v in pool["spec"]["selector"]["matchLabels"].items())
    port = template["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert pool["spec"]["targetPorts"] == [{"number": port}]
    ref = pool["spec"]["endpointPickerRef"]
    service = _by(docs, "Service")[ref["name"]]
    assert ref["port"]["number"] in [p["port"] for p in service["spec"]["ports"]]
    picker = _by(docs, "Deployment")[ref["name"]]
    assert service["spec"]["selector"] == picker["spec"]["selector"]["matchLabels"]
    args = picker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pool-name") + 1] == pool["metadata"]["name"]
    assert args[args.index("--pool-namespace") + 1] == pool["metadata"]["namespace"]
    assert args[args.index("--pool-group") + 1] == pool["apiVersion"].split("/")[0]
    config_path = args[args.index("--config-file") + 1]
    config = _by(docs, "ConfigMap")[ref["name"]]
    plugins = yaml.safe_load(config["data"][config_path.rsplit("/", 1)[1]])
    assert {"prefix-cache-scorer", "queue-scorer"} <= {p["type"] for p in plugins["plugins"]}
    binding = _by(docs, "RoleBinding")[ref["name"]]
    assert binding["subjects"][0]["name"] == picker["spec"]["template"]["spec"]["serviceAccountName"]
    rules = _by(docs, "Role")[ref["name"]]["rules"]
    assert {"pods", "inferencepools"} <= {r for rule in rules for r in rule["resources"]}


def test_compose_runs_this_nodes_copy_and_the_router_before_every_copy():
    env = {**H200, "KIMI_REPLICA_ADDRS": "127.0.0.1,10.0.0.2", "KIMI_ROUTER_POLICY": "kv_aware"}
    (text,) = render("compose", env).values()
    doc = yaml.safe_load(text)
    jsonschema.validate(doc, json.loads(COMPOSE_SPEC.read_text()))
    router = doc["services"]["kimi-k2-5-router"]
    assert router["depends_on"] == ["kimi-k2-5"]
    proc = build({k: str(v) for k, v in router["environment"].items()}).this_process()
    argv = proc.router_argv  # the router behind the stream front
    urls = argv[argv.index("--worker-urls") + 1:argv.index("--host")]
    assert list(urls) == ["http://127.0.0.1:8000", "http://10.0.0.2:8000"]
    engine = build({k: str(v) for k, v in doc["services"]["kimi-k2-5"]["environment"].items()}).this_process()
    assert engine.argv[:2] == ("vllm", "serve") and "--kv-events-config" in engine.argv


REFUSED = {
    "kv-store": ({**H200, "KIMI_REPLICAS": "2", "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake",
                  "KIMI_MOONCAKE_MASTER_ADDR": "m", "KIMI_INSTANCE_ADDRS": "a,b"}, "plan", "KIMI_KV_INSTANCES"),
    "power-of-two-alone": ({**H200, "KIMI_ROUTER_POLICY": "power_of_two"}, "plan", "KIMI_REPLICAS=2"),
    "kv-aware-multi-node": ({**MULTI, "KIMI_REPLICAS": "2", "KIMI_HEAD_ADDR": "h", "KIMI_IFACE": "eth0",
                             "KIMI_ROUTER_POLICY": "kv_aware"}, "plan", "cache_aware"),
    "kv-aware-pd": ({**PD, "KIMI_ROUTER_POLICY": "kv_aware"}, "plan", "cache_aware"),
    "kv-aware-kubernetes": ({**H200, "KIMI_REPLICAS": "2", "KIMI_ROUTER_POLICY": "kv_aware"}, "k8s",
                            "KIMI_REPLICA_ADDRS"),
    "kv-aware-twice": ({**H200, "KIMI_REPLICAS": "2", "KIMI_ROUTER_POLICY": "kv_aware",
                        "KIMI_EXTRA_ARGS": "--kv-events-config {}"}, "plan", "remove it"),
    # a discovered PD fleet: each pool by its own selector terms, every pod on one port (no shared node)
    "pd-selector-without-pool-terms": ({**PD, "KIMI_ROUTER_SELECTOR": "app=kimi"}, "plan", "`prefill:key=value`"),
    "pd-shared-node-discovered": ({**PD, "KIMI_PREFILL_NODES": "0", "KIMI_DECODE_NODES": "0", "KIMI_SKIP_MEMORY_CHECK": "1",
                                   "KIMI_ROUTER_SELECTOR": "prefill:app=p,decode:app=d"}, "plan",
                                  "KIMI_PREFILL_NODES and KIMI_DECODE_NODES 1 or more"),
    "pool-terms-without-pools": ({**H200, "KIMI_REPLICAS": "2", "KIMI_ROUTER_SELECTOR": "prefill:app=p"}, "plan",
                                 "plain key=value"),
    # PD units behind no router (copies, or the groups an autoscaler adds): only the router pairs their pools
    "pd-units-no-router": ({**PD, "KIMI_ROUTER": "none", "KIMI_REPLICAS": "2"}, "plan", "KIMI_ROUTER=vllm-router"),
    "pd-autoscaled-no-router": ({**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_ROUTER": "none",
                                 "KIMI_AUTOSCALING": "hpa"}, "k8s", "KIMI_AUTOSCALING=off"),
    "gateway-pd": ({**PD, "KIMI_ROUTER": "gateway", "KIMI_REPLICAS": "1",
                    "KIMI_ROUTER_POLICY": "cache_aware"}, "plan", "KIMI_ROUTER=vllm-router"),
    "gateway-compose": ({**H200, "KIMI_REPLICAS": "2", "KIMI_ROUTER": "gateway"}, "compose", "--format k8s"),
    # vllm-router asks the engines' render endpoints for token ids, which vLLM 0.19.1 cannot serve
    "token-ids-on-0.19.1": ({**H200, "KIMI_REPLICAS": "2", "KIMI_VLLM_VERSION": "0.19.1"}, "plan",
                            "KIMI_ROUTER_POLICY=round_robin"),
    "hosts-on-kubernetes": ({**H200, "KIMI_REPLICA_ADDRS": "a,b"}, "k8s", "Unset KIMI_REPLICA_ADDRS"),
    # a cloud platform scales its own copies behind its own load balancer
    "sagemaker": ({**H200, "KIMI_REPLICAS": "2"}, "sagemaker", "instance count"),
    "skypilot": ({**H200, "KIMI_REPLICAS": "2"}, "skypilot", "instance count"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_cannot_work_is_refused_with_a_way_out(case):
    env, fmt, way_out = REFUSED[case]
    with pytest.raises(KimiError) as err:
        build(env).plan if fmt == "plan" else render(fmt, env)
    assert err.value.code == "unsupported_combination", err.value.message
    assert way_out in err.value.message


def test_the_cli_exits_2_with_one_line(tmp_path):
    import os

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **REFUSED["kv-aware-kubernetes"][0]}
    done = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", "k8s", "--output",
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "unsupported_combination" not in done.stdout


@pytest.mark.parametrize("env, missing", [
    ({**H200, "KIMI_REPLICAS": "2", "KIMI_ROLE": "router"}, "REPLICA_1"),
    ({**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "2", "KIMI_ROLE": "router",
      "KIMI_PREFILL_ADDRS": "p0,p1", "KIMI_DECODE_ADDRS": "d0"}, "DECODE_NODE_2")])
def test_the_router_does_not_start_without_every_copys_address(env, missing):
    with pytest.raises(KimiError) as err:
        build(env).this_process()
    assert err.value.code == "missing_setting" and missing in err.value.message
    assert "KIMI_REPLICA_ADDRS" in err.value.message


@pytest.mark.parametrize("policy, front, added", [
    ("cache_aware", "on", ["--enable-scale-out", "--max-num-queued-reqs"]),
    ("round_robin", "off", ["--max-num-queued-reqs"]),
    # the stream front parses a continued chat stream with the engines' derender endpoint (issue 48)
    ("round_robin", "on", ["--enable-scale-out", "--max-num-queued-reqs"]),
    ("kv_aware", "on", ["--enable-scale-out", "--kv-events-config", "--max-num-queued-reqs"])])
def test_every_engine_serves_what_the_routers_policy_asks_of_it(policy, front, added):
    from entrypoint.core.vllm.vllm_cli import spec_for, values

    one = build({**H200, "KIMI_STRATEGY": "single_node_dep"}).plan.processes[0]
    plan = build({**H200, "KIMI_STRATEGY": "single_node_dep", "KIMI_REPLICA_ADDRS": "a,b",
                  "KIMI_ROUTER_POLICY": policy, "KIMI_STREAM_FRONT": front}).plan
    engine = plan.processes[0]
    assert [t for t in engine.argv if t.startswith("--") and t not in one.argv] == added
    found = values(list(engine.argv[3:]), spec_for("0.32.0"))  # vLLM's own grammar reads them
    assert found.get("enable_scale_out", False) is ("--enable-scale-out" in added)
    assert all(engine.provenance[flag] == "fleet" for flag in added)


def test_a_gateway_fleet_leaves_the_engines_as_they_are():
    env = {**H200, "KIMI_REPLICAS": "2"}
    assert launch_for("k8s", {**env, "KIMI_ROUTER": "gateway"}).plan.processes == \
        launch_for("k8s", H200).plan.processes


@pytest.mark.parametrize("env", [
    {**H200, "KIMI_REPLICA_ADDRS": "a,b", "KIMI_ROUTER_POLICY": "kv_aware", "KIMI_EXTRA_ARGS": "--block-size 32"},
    {**MULTI, "KIMI_HEAD_ADDR": "h0", "KIMI_IFACE": "eth0", "KIMI_REPLICAS": "2"},
    {**PD, "KIMI_PREFILL_ADDRS": "p0,p1", "KIMI_DECODE_ADDRS": "d0,d1", "KIMI_REPLICAS": "2"}])
def test_the_fleets_router_is_a_typed_process(env):
    """The router is one process of kind ROUTER with its ports by purpose (the API, and the
    Prometheus endpoint it binds), no vLLM arguments; the engines' added flags are among their
    effective arguments (Process.vllm), and the KV-event block size is the engines' own."""
    from entrypoint.core.compose.plan import Kind, Port

    plan = build(env).plan
    (router,) = [p for p in plan.processes if p.kind is Kind.ROUTER]
    assert not router.is_engine and router.vllm is None and router.local_gpus == 0
    args = list(router.args)
    assert router.ports[Port.HTTP] == router.port == int(args[args.index("--port") + 1])
    assert router.ports[Port.METRICS] == int(args[args.index("--prometheus-port") + 1])
    assert sorted(router.listens) == sorted({router.port, router.ports[Port.METRICS]})  # two sockets of its own
    assert all(p.is_engine for p in plan.processes if p is not router)
    if env.get("KIMI_ROUTER_POLICY") == "kv_aware":
        assert all(p.vllm.get("enable_scale_out") and p.vllm.text("kv_events_config") for p in plan.engines)
        assert args[args.index("--kv-event-block-size") + 1] == "32"


def test_the_routers_two_sockets_may_not_share_a_port():
    with pytest.raises(KimiError, match="listen twice on port 29000"):
        build({**H200, "KIMI_REPLICA_ADDRS": "a,b", "KIMI_ROUTER_PORT": "29000"})


# LWS's own group-index label (sigs.k8s.io/lws api/leaderworkerset/v1 GroupIndexLabelKey), written
# here rather than taken from render/k8s_fleet.py, so a wrong label there fails the test below
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"


@pytest.mark.parametrize("case", ["pd-x2-operated", "pd-tp-x3-hpa", "pd-x1-autoscaled"])
def test_each_pd_group_runs_as_its_own_units_pd_cluster(case):
    """A PD fleet on Kubernetes: each pool's LeaderWorkerSet has a group per unit, and each group's
    pods (the next group an autoscaler adds too) see their own group's pod names as the pool's
    addresses (LWS's group-index label through the downward API, expanded by the kubelet: its
    stand-in), so a group's DP head and NIXL side channels are its own pods'; every pool's pods
    listen on one port, the router's discovery port."""
    from tests.edges.test_repros_27 import kubelet_expand

    env = FLEETS[case]
    docs = documents("k8s", env)
    sets = _by(docs, "LeaderWorkerSet")
    ports = set()
    for role in ("prefill", "decode"):
        lws = sets[f"kimi-k2-5-{role}"]
        size = lws["spec"]["leaderWorkerTemplate"]["size"]
        assert lws["spec"]["replicas"] == int(env["KIMI_REPLICAS"])
        for group in range(int(env["KIMI_REPLICAS"]) + 1):
            for template in (t for k, t in lws["spec"]["leaderWorkerTemplate"].items() if k.endswith("Template")
                             and k != "volumeClaimTemplates"):
                container = template["spec"]["containers"][0]
                labels = {LWS_GROUP_INDEX: str(group)}  # what LWS stamps on each pod of the group
                defined: dict = {}
                for item in container["env"]:
                    if "configMapKeyRef" in item.get("valueFrom", {}):  # the user's settings
                        defined[item["name"]] = container_environ(docs, {"env": [item]})[item["name"]]
                    elif "valueFrom" in item:
                        path = item["valueFrom"]["fieldRef"]["fieldPath"]
                        defined[item["name"]] = labels[path.split("'")[1]]
                    else:
                        defined[item["name"]] = kubelet_expand(item["value"], defined)
                own = [f"kimi-k2-5-{role}-{group}.kimi-k2-5-{role}"] + [
                    f"kimi-k2-5-{role}-{group}-{i}.kimi-k2-5-{role}" for i in range(1, size)]
                assert f"KIMI_{role.upper()}_ADDRS" not in defined  # no pod carries its peers' addresses
                # the pod's own start names its group's pods (KIMI_PEER_NAMES=k8s, its group index)
                named = with_peers(defined)
                assert named[f"KIMI_{role.upper()}_ADDRS"].split(",") == own
                # ... and its process's DP head is its group's leader
                started = build(defined).plan
                head = next(p for p in started.processes if p.role == role)
                if "--data-parallel-address" in head.argv:
                    assert head.argv[head.argv.index("--data-parallel-address") + 1] == own[0]
                assert head.env.get("VLLM_NIXL_SIDE_CHANNEL_HOST") == own[0]
                ports |= {p["containerPort"] for p in container.get("ports", ()) if p["name"] == "http"}
    router = _by(docs, "Deployment")["kimi-k2-5-router"]
    assert ports and len(ports) == 1  # both pools on one port
    env_of = container_environ(docs, router["spec"]["template"]["spec"]["containers"][0])
    router_plan = build({k: v for k, v in env_of.items() if k.startswith("KIMI_")}).plan
    argv = list(router_plan.find("router", 0).argv)
    assert argv[argv.index("--service-discovery-port") + 1] == str(ports.pop())
    assert "--prefill" not in argv and "--decode" not in argv  # no static units: the router discovers them
    assert router["spec"]["template"]["spec"]["serviceAccountName"] == "kimi-k2-5-router"
    if env.get("KIMI_MONITORING"):
        assert _by(docs, "PodMonitor")["kimi-k2-5-router"]["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    scalers = [d for d in docs if d["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")]
    assert sorted(s["spec"]["scaleTargetRef"]["name"] for s in scalers) == sorted(sets)
    assert sorted(p["spec"]["selector"]["matchLabels"]["leaderworkerset.sigs.k8s.io/name"]
                  for p in _by(docs, "PodDisruptionBudget").values()) == sorted(sets)


# ---------------------------------------------------------------- shedding (issue 38)


def _queued(env) -> list:
    from entrypoint.app.launch import build

    return [p.args[p.args.index("--max-num-queued-reqs") + 1] if "--max-num-queued-reqs" in p.args else None
            for p in build(env).plan.engines]


@pytest.mark.parametrize("env, want", [
    # behind the vLLM router: 2 x the running batch (vLLM's API-server default 1024; recipes/fleet.yaml)
    ({"KIMI_HARDWARE": "h200", "KIMI_VLLM_VERSION": "0.33.0"}, ["2048"]),
    ({"KIMI_HARDWARE": "h200", "KIMI_VLLM_VERSION": "0.32.0"}, ["2048"]),
    # the recipe's own --max-num-seqs (Kimi-K3 on Hopper: 5)
    ({"KIMI_RECIPE": "kimi-k3", "KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2",
      "KIMI_HEAD_ADDR": "10.0.0.1", "KIMI_IFACE": "eth0"}, ["10", "10"]),
    # the user's bound wins; 0.19.1 has no such flag; no router in front: nothing retries a 503
    ({"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": "--max-num-queued-reqs 7"}, ["7"]),
    ({"KIMI_HARDWARE": "h200", "KIMI_VLLM_VERSION": "0.19.1", "KIMI_ROUTER_POLICY": "round_robin"}, [None]),
    ({"KIMI_HARDWARE": "h200", "KIMI_ROUTER": "none"}, [None]),
])
def test_fleet_engines_shed_load_past_their_bound(env, want):
    assert _queued({"KIMI_REPLICAS": "2", "KIMI_REPLICA_ADDRS": "10.0.1.1,10.0.1.2", **env}) == want
    if "KIMI_EXTRA_ARGS" not in env:  # one copy: no fleet, no bound
        assert _queued({k: v for k, v in env.items() if k != "KIMI_ROUTER_POLICY"}) == [None] * len(want)


def test_the_fleets_threshold_replaces_the_store_routers_and_nothing_else():
    """recipes/fleet.yaml policies.cache_aware.tuning: the fleet's router is the KV store router's
    tuning with the fleet's --balance-abs-threshold (measured: docs/fleet.md); a tuning flag the store
    router does not take, or tuning without `tuned`, is a data defect."""
    from pydantic import ValidationError

    from entrypoint.core.compose.fleet import load_fleet, tuned_args
    from entrypoint.core.data.fleet_schema import Policy

    store = ["--cache-threshold", "0.5", "--balance-abs-threshold", "4", "--balance-rel-threshold", "1.1"]
    assert tuned_args(store, {"--balance-abs-threshold": "2"}) == [
        "--cache-threshold", "0.5", "--balance-abs-threshold", "2", "--balance-rel-threshold", "1.1"]
    assert tuned_args(store, {}) == store
    with pytest.raises(ValueError, match="--balance-typo"):
        tuned_args(store, {"--balance-typo": "2"})
    with pytest.raises(ValidationError, match="tuned: true"):
        Policy(description="x", tuning={"--balance-abs-threshold": "2"})
    fleet = load_fleet()
    router = build({"KIMI_HARDWARE": "h200", "KIMI_REPLICAS": "2", "KIMI_REPLICA_ADDRS": "10.0.0.1,10.0.0.2",
                    "KIMI_ROLE": "router"}).plan.find("router", 0)
    argv = list(router.argv)
    for flag, value in fleet.policies["cache_aware"].tuning.items():
        assert argv[argv.index(flag) + 1] == value
    assert argv[argv.index("--balance-rel-threshold") + 1] == "1.1"  # the store router's own, kept


SELECTORS = {  # a router's selector set by hand, against the real rendering of the copies
    "single": ({**H200, "KIMI_REPLICAS": "2"}, "app.kubernetes.io/component=single",
               "app.kubernetes.io/component=singel", "the copies' pods"),
    "multi-node": ({**MULTI, "KIMI_REPLICAS": "2"},
                   "leaderworkerset.sigs.k8s.io/worker-index=0,app.kubernetes.io/part-of=kimi-serve",
                   "leaderworkerset.sigs.k8s.io/worker-index=9", "the copies' pods"),
    "pd": ({**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "2"},
           "prefill:app.kubernetes.io/component=prefill,decode:app.kubernetes.io/component=decode,"
           "decode:leaderworkerset.sigs.k8s.io/group-index=1",
           "prefill:app.kubernetes.io/component=prefill,decode:app.kubernetes.io/component=prefill",
           "the decode pool's pods"),
}


@pytest.mark.parametrize("case", sorted(SELECTORS))
def test_a_router_selector_that_matches_no_rendered_copy_is_refused(case):
    """Issue 40: KIMI_ROUTER_SELECTOR set by hand must select some rendered copy's pods (their
    template labels and those LeaderWorkerSet adds), else the router discovers nothing: exit 2 at
    plan time, one line naming the setting."""
    env, good, bad, whose = SELECTORS[case]
    docs = documents("k8s", {**env, "KIMI_ROUTER_SELECTOR": good})
    router = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("router"))
    told = read_settings(container_environ(docs, router["spec"]["template"]["spec"]["containers"][0]))
    assert ",".join(told.router_selector) == good  # the user's, from the settings ConfigMap
    with pytest.raises(KimiError) as err:
        render("k8s", {**env, "KIMI_ROUTER_SELECTOR": bad})
    message = err.value.message
    assert err.value.exit_code == 2 and "\n" not in message
    assert message.startswith(f"KIMI_ROUTER_SELECTOR={bad} matches none of {whose}") and "unset" in message
