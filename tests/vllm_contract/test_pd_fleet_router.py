"""A PD fleet on Kubernetes (core/compose/fleet.py, render/k8s_fleet.py `pd_fleet`, docs/fleet.md) against the
real vllm-router (PyPI 0.1.17): the router pod's own plan (its container's env, as the pod would
start) parses with the router's parser and selects exactly the rendered pools' API pods; and the
real router process, started with that argv before a stand-in Kubernetes API (a list and a watch
of pods, as kube-rs asks them) and stand-in engines in vLLM's shapes, discovers every unit's
prefill and decode pods on the one discovery port and sends each request prefill -> decode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from entrypoint.app.deploy import deployment_launch
from entrypoint.app.launch import build
from entrypoint.render import k8s

from tests.deploy.shapes import container_environ
from tests.deploy.netpol import LWS_INDEX_LABEL, LWS_NAME_LABEL  # LWS's labels, written by hand there
from tests.testdata import DATA
from tests.vllm_contract.test_router import ROUTER_EXE, _Worker, needs_router, parse_router_args
from tests.verify.real_vllm import free_port

H200 = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster"}
FLEETS = {
    "dep-x2": {**H200, "KIMI_REPLICAS": "2"},  # prefill DEP over 2 nodes: every node serves the API
    "tp-x3": {**H200, "KIMI_REPLICAS": "3", "KIMI_PREFILL_NODES": "2", "KIMI_PREFILL_PARALLELISM": "tp",
              "KIMI_DECODE_PARALLELISM": "tp"},  # a TP pool: only each group's leader serves
}
GROUP = "leaderworkerset.sigs.k8s.io/group-index"  # LWS's GroupIndexLabelKey
METRICS = DATA / "vllm-router-0.1.17"


def _docs(env):
    launch = deployment_launch(k8s, env)
    return [d for text in k8s.render(launch).values() for d in yaml.safe_load_all(text) if d]


def _pods(docs, replicas: int):
    """The pods LWS makes of each pool's LeaderWorkerSet: the template's labels and LWS's own (set
    name, group and worker index), with whether the pod serves the API (an `http` port)."""
    out = []
    for lws in (d for d in docs if d["kind"] == "LeaderWorkerSet"):
        spec = lws["spec"]["leaderWorkerTemplate"]
        for group in range(replicas):
            for index in range(spec["size"]):
                template = spec["leaderTemplate"] if index == 0 and "leaderTemplate" in spec else spec["workerTemplate"]
                labels = {**template["metadata"]["labels"], LWS_NAME_LABEL: lws["metadata"]["name"],
                          LWS_INDEX_LABEL: str(index), GROUP: str(group)}
                ports = [p for c in template["spec"]["containers"] for p in c.get("ports", ()) if p["name"] == "http"]
                out.append({"name": f"{lws['metadata']['name']}-{group}" + (f"-{index}" if index else ""),
                            "role": template["metadata"]["labels"]["app.kubernetes.io/component"],
                            "labels": labels, "port": ports[0]["containerPort"] if ports else None})
    return out


def _router_args(docs):
    router = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-router"))
    env = container_environ(docs, router["spec"]["template"]["spec"]["containers"][0])
    proc = build(env).this_process()  # the router pod's own start
    assert proc.role == "router"
    return list(proc.router_argv), parse_router_args(list(proc.router_argv[1:]))


def _matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@needs_router
@pytest.mark.parametrize("case", sorted(FLEETS))
def test_the_pd_router_pod_discovers_exactly_every_units_api_pods(case):
    docs = _docs(FLEETS[case])
    _, args = _router_args(docs)
    assert args.vllm_pd_disaggregation and args.service_discovery
    assert args.service_discovery_namespace == "kimi-serve"
    assert not args.prefill_urls and not args.decode_urls  # no static unit: discovery finds them all
    assert (args.prefill_policy, args.policy) == ("cache_aware", "round_robin")
    pods = _pods(docs, int(FLEETS[case]["KIMI_REPLICAS"]))
    for role, selector in (("prefill", args.prefill_selector), ("decode", args.decode_selector)):
        found = [p for p in pods if _matches(selector, p["labels"])]
        # every API pod of the pool, in every group (unit), and nothing else (no headless worker)
        assert found == [p for p in pods if p["role"] == role and p["port"] is not None], role
        assert {p["port"] for p in found} == {args.service_discovery_port}  # one port: the router's
    assert len({p["labels"][GROUP] for p in pods}) == int(FLEETS[case]["KIMI_REPLICAS"])


class _Kube(BaseHTTPRequestHandler):
    """A stand-in Kubernetes API: the pod list (kube-rs's watcher lists first), then a watch held open."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802
        self.server.paths.append(self.path)
        if "watch=true" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.server.stop.wait(60)
            return
        body = json.dumps({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"},
                           "items": self.server.pods}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


def _pod_object(pod: dict, ip: str, namespace: str) -> dict:
    return {"metadata": {"name": pod["name"], "namespace": namespace, "labels": pod["labels"], "uid": pod["name"],
                         "resourceVersion": "1"},
            "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.slow
@needs_router
def test_the_real_pd_router_discovers_every_unit_and_routes_prefill_then_decode(tmp_path):
    docs = _docs(FLEETS["tp-x3"])
    argv, args = _router_args(docs)
    pods = _pods(docs, 3)
    port, router_port, metrics = free_port(), free_port(), free_port()
    engines, objects = {}, []
    for i, pod in enumerate(pods):  # each pod a loopback address of its own, as each pod has its IP
        ip = f"127.0.1.{i + 1}"
        objects.append(_pod_object(pod, ip, args.service_discovery_namespace))
        if pod["port"] is not None:
            server = ThreadingHTTPServer((ip, port), _Worker)
            server.seen = []
            threading.Thread(target=server.serve_forever, daemon=True).start()
            engines[pod["name"]] = (pod["role"], server)
    objects.append(_pod_object({"name": "other", "labels": {"app": "other"}}, "127.0.2.1", "kimi-serve"))
    kube = ThreadingHTTPServer(("127.0.0.1", free_port()), _Kube)
    kube.pods, kube.paths, kube.stop = objects, [], threading.Event()
    threading.Thread(target=kube.serve_forever, daemon=True).start()
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{kube.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    run = [str(ROUTER_EXE), *argv[1:]]
    for flag, value in (("--service-discovery-port", port), ("--port", router_port), ("--prometheus-port", metrics),
                        ("--host", "127.0.0.1")):  # free ports here (the plan's are 8001, 8000, 29000)
        run[run.index(flag) + 1] = str(value)
    log = (tmp_path / "router.log").open("wb")
    proc = subprocess.Popen(run, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "KUBECONFIG": str(config), "NO_COLOR": "1"})
    try:
        url = f"http://127.0.0.1:{router_port}"
        deadline = time.monotonic() + 60
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
        answered = 0
        while answered < 12:
            assert proc.poll() is None, (tmp_path / "router.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "router.log").read_text()[-3000:]
            try:
                request = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
                    assert json.load(answer)["choices"][0]["message"]["content"] == "ok"
                    answered += 1
            except OSError:
                time.sleep(0.5)  # not yet discovered: the router answers 503 until both pools have a worker
        assert any(p.startswith(f"/api/v1/namespaces/{args.service_discovery_namespace}/pods") for p in kube.paths)
        posted = {name: [b for m, p, _, b in server.seen if m == "POST" and p == "/v1/chat/completions"]
                  for name, (_, server) in engines.items()}
        decode = [name for name, (role, _) in engines.items() if role == "decode"]
        # round_robin over the decode pool: every unit's decode leader served, each request after its prefill
        assert all(posted[name] for name in decode), posted
        assert all("kv_transfer_params" in b for name in decode for b in posted[name])
        prefill_bodies = [b for name, (role, _) in engines.items() if role == "prefill" for b in posted[name]]
        assert len(prefill_bodies) >= 12 and all(b["kv_transfer_params"]["do_remote_decode"] for b in prefill_bodies)
        seen = _families(urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5).read().decode())
        assert _families((METRICS / "metrics-pd.txt").read_text()) <= seen  # the fixture is what it exports
    finally:
        kube.stop.set()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        log.close()
        kube.shutdown()
        for _, server in engines.values():
            server.shutdown()


def _families(text: str) -> set:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
