"""`kimi-serve plan --format compose`: the file validates (compose-spec.json, docker-compose
config) and has one service per process with the brand's GPU access, IPC, cache and health."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jsonschema
import pytest
import yaml

from entrypoint.core.base.errors import KimiError
from entrypoint.render import docker_compose
from tests.conftest import COMPOSE_CONFIG_BOUND_S, IN_CI
from tests.deploy.shapes import COMPOSE, deployment_name, launch_for, render
from tests.testdata import COMPOSE_SPEC

SPEC = COMPOSE_SPEC
SECRET = "hf_do_not_render_me_123"


def compose_doc(environ) -> dict:
    return yaml.safe_load(render("compose", environ)[docker_compose.FILE])


@pytest.mark.parametrize("case", sorted(COMPOSE))
def test_file_validates_against_the_compose_spec(case):
    schema = json.loads(SPEC.read_text())
    jsonschema.validate(compose_doc(COMPOSE[case]), schema, cls=jsonschema.Draft7Validator)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(COMPOSE))
def test_docker_compose_config_accepts_it(case, tmp_path):
    exe = shutil.which("docker-compose")
    if exe is None:
        if IN_CI:
            pytest.fail("CI=true but docker-compose is missing (apt-get install docker-compose)")
        pytest.skip("docker-compose is not installed")
    (tmp_path / docker_compose.FILE).write_text(render("compose", COMPOSE[case])[docker_compose.FILE])
    proc = subprocess.run([exe, "-f", str(tmp_path / docker_compose.FILE), "config"], capture_output=True, text=True,
                          env={**os.environ, "HF_TOKEN": SECRET}, timeout=COMPOSE_CONFIG_BOUND_S)
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)
    launch = launch_for("compose", COMPOSE[case])
    assert len(resolved["services"]) == len(launch.plan.processes) + 1  # + the one-shot download
    for svc in resolved["services"].values():
        assert SECRET not in str(svc) and "HF_TOKEN" not in svc["environment"]
        assert svc["environment"]["HF_TOKEN_PATH"] == "/run/secrets/kimi-serve/hf_token"
    assert resolved["secrets"]["hf_token"]["file"] == str(tmp_path / "hf_token")  # beside the file


@pytest.mark.parametrize("case", sorted(COMPOSE))
def test_one_service_per_process(case):
    environ = {**COMPOSE[case], "HF_TOKEN": SECRET}
    text = render("compose", environ)[docker_compose.FILE]
    assert SECRET not in text
    doc = yaml.safe_load(text)
    launch = launch_for("compose", environ)
    brand = launch.catalog.hardware[launch.plan.hardware].brand
    name = deployment_name(environ)
    sockets = [docker_compose.SOCKET_VOLUME] if environ.get("KIMI_PRELOAD") else []  # the weight cache's (docs/day2.md)
    assert list(doc["volumes"]) == [docker_compose.CACHE_VOLUME, *sockets]
    assert doc["secrets"] == {"hf_token": {"file": "./hf_token"}}
    want = [name if p.role == "single" else f"{name}-{p.role}" for p in launch.plan.processes]
    assert list(doc["services"]) == [f"{name}-download"] + want
    download = doc["services"].pop(f"{name}-download")
    assert download["command"] == ["download"] and download["restart"] == "no"
    assert download["volumes"] == [f"{docker_compose.CACHE_VOLUME}:/cache"] and "HF_TOKEN" not in download["environment"]
    assert download["environment"]["HF_TOKEN_PATH"] == "/run/secrets/kimi-serve/hf_token"
    assert "deploy" not in download and "devices" not in download  # fetching needs no GPU
    for proc, svc in zip(launch.plan.processes, doc["services"].values()):
        target = launch.catalog.hardware[launch.plan.hardware].image_target
        # the default release (serving.yaml default_vllm 0.33.0), except where no image is built on it
        release = environ.get("KIMI_VLLM_VERSION") or ("0.34.0" if target == "rocm-gfx950" else "0.33.0")
        assert svc["image"] == f"ghcr.io/kimi-serve/kimi:{release}-{target}"
        assert "command" not in svc and "entrypoint" not in svc
        env = svc["environment"]
        assert "HF_TOKEN" not in env and env["KIMI_HARDWARE"] == environ["KIMI_HARDWARE"]
        assert env.get("KIMI_ROLE") == (None if proc.role == "single" else proc.role)
        assert svc["network_mode"] == "host" and svc["restart"] == "unless-stopped"
        health = svc["healthcheck"]
        assert health["test"] == ["CMD", "kimi-serve", "healthcheck"] and health["start_period"] == "3600s"
        engines = [w for w, p in zip(want, launch.plan.processes) if p.local_gpus]
        helpers = [w for w, p in zip(want, launch.plan.processes) if not p.local_gpus and p.role != "router"]
        if proc.role == "router":
            assert svc["depends_on"] == engines and "deploy" not in svc and "devices" not in svc
            continue
        if proc.role in ("master", "store"):  # a KV store's: no GPU, no weights
            assert not {"deploy", "devices", "volumes", "ipc", "depends_on"} & set(svc)
            continue
        if proc.role == "lmcache":  # LMCache's server: the engine's GPUs and IPC, no weights
            assert svc["ipc"] == "host" and not {"volumes", "depends_on"} & set(svc)
        else:  # an engine, or the weight cache (KIMI_PRELOAD): the engine waits for it healthy
            waits = helpers + [w for w, p in zip(want, launch.plan.processes) if p.role == "preload" and p is not proc]
            assert svc["ipc"] == "host"
            assert svc["volumes"] == [f"{docker_compose.CACHE_VOLUME}:/cache", *(f"{v}:/run/weight-cache" for v in sockets)]
            assert svc["depends_on"] == {f"{name}-download": {"condition": "service_completed_successfully"},
                                         **{h: {"condition": "service_healthy"} for h in waits}}
        if brand == "nvidia":
            assert svc["deploy"]["resources"]["reservations"]["devices"] == [
                {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
        else:
            assert svc["devices"] == ["/dev/kfd", "/dev/dri"] and svc["group_add"] == ["video"]
            assert svc["security_opt"] == ["seccomp=unconfined", "no-new-privileges:true"]


def test_pd_pools_are_reached_on_loopback_unless_set():
    doc = compose_doc(COMPOSE["pd-shared-b200"])
    for svc in doc["services"].values():
        assert svc["environment"]["KIMI_PREFILL_ADDRS"] == "127.0.0.1"
        assert svc["environment"]["KIMI_DECODE_ADDRS"] == "127.0.0.1"
    doc = compose_doc({**COMPOSE["pd-shared-b200"], "KIMI_PREFILL_ADDRS": "10.1.1.1", "KIMI_DECODE_ADDRS": "10.1.1.1"})
    assert doc["services"]["kimi-k2-5-router"]["environment"]["KIMI_PREFILL_ADDRS"] == "10.1.1.1"


@pytest.mark.parametrize("environ", [
    {"KIMI_HARDWARE": "h100", "KIMI_NODES": "2"},
    {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster"},
], ids=["multi-node", "pd-own-nodes"])
def test_several_nodes_are_not_a_compose_deployment(environ):
    with pytest.raises(KimiError, match="--format k8s"):
        render("compose", environ)


def test_cli_multi_node_compose_exits_2_pointing_to_k8s():
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "KIMI_HARDWARE": "h100",
           "KIMI_NODES": "2", "KIMI_HEAD_ADDR": "10.0.0.1", "KIMI_IFACE": "eth0"}
    proc = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", "compose"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--format k8s" in proc.stderr and "Traceback" not in proc.stderr


def test_a_kv_store_on_one_node_is_reached_on_loopback():
    doc = compose_doc(COMPOSE["kv-distributed-mi355x"])
    for svc in doc["services"].values():
        env = svc["environment"]
        assert env["KIMI_MOONCAKE_MASTER_ADDR"] == env["KIMI_INSTANCE_ADDRS"] == "127.0.0.1"
        assert env["KIMI_KV_INSTANCES"] == "1"
    assert doc["services"]["kimi-k2-5-master"]["environment"]["KIMI_ROLE"] == "master"
    with pytest.raises(KimiError, match="--format k8s") as err:
        compose_doc({**COMPOSE["kv-distributed-mi355x"], "KIMI_KV_INSTANCES": "2"})
    assert err.value.code == "unsupported_combination"
