"""A fleet's router (core/compose/fleet.py) is the real vllm-router (PyPI 0.1.17): every fleet plan's router
argv parses with the router's own parser (`parse_router_args`), the Kubernetes router pod's own
plan (its container's env, as the pod would start) discovers exactly the pods the rendering
labels, and the real router process starts with a plan's argv (its Rust core validates what the
parser does not: static KV-event sources, selectors) and routes to stand-in engines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import threading

import pytest

from entrypoint.app.launch import build

from entrypoint.app.deploy import deployment_launch
from entrypoint.render import k8s

from tests.deploy.shapes import container_environ
from tests.vllm_contract.test_router import ROUTER_EXE, free_metrics_port, needs_router, parse_router_args
from tests.verify.real_vllm import free_port

H200 = {"KIMI_HARDWARE": "h200"}
ADDRS = "10.0.0.1,10.0.0.2,fd00::3"


def _router(env):
    plan = build({**H200, **env}).plan
    return plan, plan.find("router", 0)


@needs_router
@pytest.mark.parametrize("strategy, extra", [
    ("single_node_tp", {}), ("single_node_dep", {}),
    ("multi_node_tp", {"KIMI_NODES": "2", "KIMI_HEAD_ADDR": "10.0.0.1", "KIMI_IFACE": "eth0"}),
    ("multi_node_dep", {"KIMI_NODES": "2", "KIMI_HEAD_ADDR": "10.0.0.1", "KIMI_IFACE": "eth0"})])
@pytest.mark.parametrize("policy", ["cache_aware", "round_robin", "power_of_two", "consistent_hash"])
def test_fleet_router_argv_parses_with_the_real_router(strategy, extra, policy):
    plan, router = _router({"KIMI_STRATEGY": strategy, "KIMI_REPLICA_ADDRS": ADDRS, "KIMI_ROUTER_POLICY": policy,
                            **extra})
    args = parse_router_args(list(router.router_argv[1:]))
    port = plan.processes[0].port or 8000
    assert args.policy == policy
    assert list(args.worker_urls) == [f"http://10.0.0.1:{port}", f"http://10.0.0.2:{port}", f"http://[fd00::3]:{port}"]
    # the fleet's port is the KV store router's (clear of the engine's 8000), where the stream front
    # listens; the router behind it on loopback (issue 48)
    assert router.port == 30080 and "0.0.0.0" in router.argv[:router.argv.index("--")]
    assert (args.host, args.port) == ("127.0.0.1", router.front.router_port)
    assert (args.prometheus_host, args.prometheus_port) == ("0.0.0.0", 29000)
    assert args.health_check_endpoint == "/health"
    assert not args.service_discovery and not args.vllm_pd_disaggregation
    if policy == "cache_aware":  # the KV store router's tuning (recipes/kv_offload.yaml), only for its policy,
        # rebalancing sooner (past 2 requests of difference, not 4: recipes/fleet.yaml, measured)
        assert (args.cache_threshold, args.balance_abs_threshold, args.balance_rel_threshold) == (0.5, 2, 1.1)
    else:
        assert args.cache_threshold == 0.3  # the router's own default


@needs_router
def test_kv_aware_router_subscribes_to_each_copys_engine_events():
    plan, router = _router({"KIMI_STRATEGY": "single_node_dep", "KIMI_REPLICA_ADDRS": "10.0.0.1,10.0.0.2",
                            "KIMI_ROUTER_POLICY": "kv_aware"})
    args = parse_router_args(list(router.router_argv[1:]))
    assert args.policy == "kv_aware"
    engine = plan.processes[0]
    config = json.loads(engine.argv[engine.argv.index("--kv-events-config") + 1])
    assert config["enable_kv_cache_events"] is True and config["publisher"] == "zmq"
    # single_node_dep: 8 engines (DP 8) behind one API server; vLLM offsets the publisher port per DP rank
    assert "--data-parallel-size" in engine.argv and engine.argv[engine.argv.index("--data-parallel-size") + 1] == "8"
    first = [f"tcp://10.0.0.1:{5557 + r}" for r in range(8)]
    assert args.kv_event_source[0] == "http://10.0.0.1:8000=" + ",".join(first)
    assert len(args.kv_event_source) == 2
    assert args.kv_event_model == "moonshotai/Kimi-K2.5" and args.kv_event_block_size == 16


@needs_router
def test_pd_fleet_router_names_every_units_pool_heads():
    plan, router = _router({"KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "2", "KIMI_PREFILL_NODES": "1",
                            "KIMI_DECODE_NODES": "1", "KIMI_PREFILL_PARALLELISM": "tp",
                            "KIMI_DECODE_PARALLELISM": "tp", "KIMI_PREFILL_ADDRS": "p0,p1",
                            "KIMI_DECODE_ADDRS": "d0,d1"})
    args = parse_router_args(list(router.router_argv[1:]))
    assert args.vllm_pd_disaggregation
    assert [u for u, _ in args.prefill_urls] == ["http://p0:8001", "http://p1:8001"]
    assert list(args.decode_urls) == ["http://d0:8002", "http://d1:8002"]
    assert (args.prefill_policy, args.policy) == ("cache_aware", "round_robin")  # prompts are cached on prefill
    # each unit's own engines are the unit's own PD cluster: unit 0's processes here
    assert [p.role for p in plan.processes if p.role != "router"] == ["prefill", "decode"]


def _pod_env(docs, doc) -> dict:
    return container_environ(docs, doc["spec"]["template"]["spec"]["containers"][0])


def _rendered(env):
    launch = deployment_launch(k8s, {**H200, **env})
    import yaml

    docs = [d for text in k8s.render(launch).values() for d in yaml.safe_load_all(text) if d]
    return launch, docs


@needs_router
@pytest.mark.parametrize("env", [{"KIMI_REPLICAS": "3"},
                                 {"KIMI_REPLICAS": "2", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2",
                                  "KIMI_ROUTER_POLICY": "power_of_two"}])
def test_kubernetes_router_pod_discovers_the_rendered_copies(env):
    _launch, docs = _rendered(env)
    router_doc = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-router"))
    pod_env = _pod_env(docs, router_doc)
    # the router pod's own start: its container's env, as kimi-serve resolves it there
    started = build(pod_env)
    proc = started.this_process()
    assert proc.role == "router"
    args = parse_router_args(list(proc.router_argv[1:]))
    assert args.service_discovery and args.service_discovery_namespace == "kimi-serve"
    engines = next(d for d in docs if d["kind"] in ("Deployment", "LeaderWorkerSet") and d is not router_doc)
    if engines["kind"] == "Deployment":
        labels = engines["spec"]["template"]["metadata"]["labels"]
        port = engines["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
        assert engines["spec"]["replicas"] == 3
    else:  # the router names each group's leader: LWS labels its pods with the set's name and worker index
        labels = {k8s.LWS_NAME_LABEL: engines["metadata"]["name"], k8s.LWS_INDEX_LABEL: "0"}
        leader = engines["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
        port = leader["ports"][0]["containerPort"]
        assert engines["spec"]["replicas"] == 2
    assert args.selector and all(labels.get(k) == v for k, v in args.selector.items())
    assert args.service_discovery_port == port
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-api"))
    assert service["spec"]["selector"] == router_doc["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["port"] == proc.port  # the stream front's, before the router
    assert args.port == proc.front.router_port
    # the router's Role lets its ServiceAccount list and watch pods, in its namespace only
    role = next(d for d in docs if d["kind"] == "Role")
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    pod = router_doc["spec"]["template"]["spec"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"] and pod["automountServiceAccountToken"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {"list", "watch"} <= set(role["rules"][0]["verbs"]) and role["rules"][0]["resources"] == ["pods"]


class _Engine(BaseHTTPRequestHandler):
    """A stand-in engine in vLLM's shapes: /health, /v1/models, /v1/chat/completions (answers its address)."""

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        elif self.path == "/health":
            self._send(200, {})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(200, {"id": "x", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": self.server.server_address[0]},
             "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    def log_message(self, *args):
        pass


def _get(url: str, timeout: float = 5):
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 - loopback
        return answer.read().decode()


@pytest.mark.slow
@needs_router
@pytest.mark.parametrize("policy", ["round_robin", "kv_aware"])
def test_the_real_router_starts_with_a_fleet_plan_and_routes_to_every_copy(policy, tmp_path):
    # two copies on two loopback addresses, one engine port (as two hosts would be), the plan's argv verbatim
    engine_port = free_port()
    engines = [ThreadingHTTPServer((host, engine_port), _Engine) for host in ("127.0.0.1", "127.0.0.2")]
    for server in engines:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    env = {"KIMI_STRATEGY": "single_node_tp", "KIMI_PORT": str(engine_port), "KIMI_REPLICA_ADDRS": "127.0.0.1,127.0.0.2",
           "KIMI_ROUTER_POLICY": policy, "KIMI_ROUTER_HOST": "127.0.0.1", "KIMI_ROUTER_PORT": str(port),
           "KIMI_STREAM_FRONT": "off"}  # the router alone: its own contract (the front: tests/live/test_fleet.py)
    _, router = _router(env)
    argv = [str(ROUTER_EXE), *free_metrics_port(router.argv[1:])]  # a free port here (the plan's is 29000)
    metrics = int(argv[argv.index("--prometheus-port") + 1])
    log = (tmp_path / "router.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "router.log").read_text()[-3000:]
                assert time.monotonic() < deadline, (tmp_path / "router.log").read_text()[-3000:]
                time.sleep(0.3)
        served = set()
        for _ in range(6):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
                                             data=json.dumps({"model": "m", "messages": [
                                                 {"role": "user", "content": "hi"}]}).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
                served.add(json.load(answer)["choices"][0]["message"]["content"])
        if policy == "round_robin":
            assert served == {"127.0.0.1", "127.0.0.2"}
        text = _get(f"http://127.0.0.1:{metrics}/metrics")
        assert "vllm_router_active_workers 2" in text  # what its PodMonitor scrapes
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        log.close()
        for server in engines:
            server.shutdown()


@pytest.mark.slow
@pytest.mark.serial  # vLLM's parser environment (scripts/vllm-parser-env.sh) is installed by the first
def test_the_fleet_engines_argv_parses_with_vllms_real_parser():
    """What the fleet adds to every engine (--enable-scale-out, --kv-events-config) is what vLLM's own
    parser and its post-parse validation accept: the KV-events JSON builds vLLM's KVEventsConfig."""
    from tests.vllm_contract.test_real_parser import real_check, real_version

    argvs = []
    for strategy in ("single_node_tp", "single_node_dep"):
        for policy in ("cache_aware", "kv_aware"):
            plan, _ = _router({"KIMI_STRATEGY": strategy, "KIMI_REPLICA_ADDRS": "10.0.0.1,10.0.0.2",
                               "KIMI_ROUTER_POLICY": policy, "KIMI_VLLM_VERSION": real_version()})
            engine = plan.processes[0]
            assert "--enable-scale-out" in engine.argv
            argvs.append(list(engine.argv[1:]))
    results = real_check(argvs)
    assert [r["ok"] for r in results] == [True] * len(argvs), [r["error"] for r in results]
