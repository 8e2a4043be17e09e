"""KIMI_PRELOAD=1 (issue 30, docs/day2.md): `vllm preload` beside the engine, the engine loading
from it with `--load-format ipc_cache`; refused where recipes/vllm/preload.yaml has no evidence
(the release, the GPU brand, the layout). tests/vllm_contract/test_preload_real.py parses both
argvs with vLLM 0.32.0's own parsers."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from entrypoint.app.launch import build
from entrypoint.core.base.errors import INVALID_VALUE, UNSUPPORTED_COMBINATION, KimiError
from entrypoint.core.compose import preload
from entrypoint.core.compose.plan import Kind, Port
from entrypoint.core.data.record import Record
from entrypoint.render import docker_compose
from tests.deploy.k8s_schema import validate
from tests.deploy.shapes import documents, render
from tests.testdata import COMPOSE_SPEC

ON = {"KIMI_HARDWARE": "h200", "KIMI_PRELOAD": "1", "KIMI_VLLM_VERSION": "0.32.0"}


def _option(argv, name):
    """The value after `name` in an argv (the test reads the rendered words, as a reader would)."""
    return argv[argv.index(name) + 1]


def test_the_plan_has_the_engine_and_the_weight_cache_beside_it():
    plan = build(ON).plan
    assert [p.kind for p in plan.processes] == [Kind.ENGINE, Kind.PRELOAD]
    engine, daemon = plan.processes
    assert engine.vllm.get("load_format") == "ipc_cache"
    extra = json.loads(engine.vllm.get("model_loader_extra_config"))
    assert daemon.argv[:4] == ("vllm", "preload", "--model", engine.model)
    assert extra == {"socket_dir": _option(daemon.argv, "--weight-cache-socket-dir")}  # where the engine looks
    assert daemon.ports == {Port.HEALTH: int(_option(daemon.argv, "--weight-cache-health-port"))}
    assert daemon.local_gpus == engine.local_gpus == 8 and not daemon.is_engine and daemon.vllm is None
    # the daemon loads from disk, with the engine's layout and model flags, without the API server's
    assert "ipc_cache" not in daemon.argv and "--load-format" not in daemon.argv
    for flag in ("--tensor-parallel-size", "--trust-remote-code", "--speculative-config"):
        assert flag in daemon.argv and flag in engine.argv
    for flag in ("--tool-call-parser", "--enable-auto-tool-choice"):
        assert flag in engine.argv and flag not in daemon.argv
    assert daemon.drain_s == engine.drain_s == 300  # it holds the weights until the engine has drained


def test_without_the_setting_the_plan_is_unchanged():
    plain = build({k: v for k, v in ON.items() if k != "KIMI_PRELOAD"}).plan
    assert [p.kind for p in plain.processes] == [Kind.ENGINE]
    assert "--load-format" not in plain.processes[0].argv
    assert build(ON).plan.processes[0].argv[:len(plain.processes[0].argv)] == plain.processes[0].argv


def test_the_users_args_still_come_last_and_reach_the_daemon():
    plan = build({**ON, "KIMI_EXTRA_ARGS": "--max-model-len 8192 --chat-template /t/chat.jinja"}).plan
    engine, daemon = plan.processes
    assert engine.argv[-4:] == ("--max-model-len", "8192", "--chat-template", "/t/chat.jinja")
    # the daemon takes the engine's options, less the API server's (its parser has no --chat-template)
    assert "--max-model-len" in daemon.argv and "--chat-template" not in daemon.argv
    # the port is KIMI_PORT's (a --port of the user's is refused): the engine listens there, the daemon has none
    engine, daemon = build({**ON, "KIMI_PORT": "9000"}).plan.processes
    assert engine.port == 9000 and _option(engine.argv, "--port") == "9000" and "--port" not in daemon.argv


def test_the_container_of_role_preload_runs_the_daemon():
    launch = build({**ON, "KIMI_ROLE": "preload"})
    assert launch.this_process().kind is Kind.PRELOAD
    assert build(ON).this_process().is_engine


def _refused(environ) -> str:
    with pytest.raises(KimiError) as err:
        build(environ)
    assert err.value.code == UNSUPPORTED_COMBINATION
    return err.value.message


@pytest.mark.parametrize("version", ["0.19.1", "0.33.0"])
def test_a_release_without_evidence_is_refused(version):
    message = _refused({**ON, "KIMI_VLLM_VERSION": version})
    assert f"vLLM {version}" in message and "0.32.0" in message and "unset KIMI_PRELOAD" in message


def test_multi_node_and_pd_are_refused():
    message = _refused({**ON, "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2", "KIMI_HEAD_ADDR": "10.0.0.1"})
    assert "multi_node_tp" in message and "single-node" in message
    assert "pd_cluster" in _refused({**ON, "KIMI_STRATEGY": "pd_cluster"})


def test_a_kv_offload_and_a_load_format_of_the_user_are_refused():
    assert "KIMI_KV_OFFLOAD=lmcache" in _refused({**ON, "KIMI_KV_OFFLOAD": "lmcache"})
    # a --load-format of the user's is refused whatever KIMI_PRELOAD says (the load format is KIMI_LOAD_FORMAT's)
    with pytest.raises(KimiError) as err:
        build({**ON, "KIMI_EXTRA_ARGS": "--load-format safetensors"})
    assert err.value.code == INVALID_VALUE
    assert "--load-format" in err.value.message and "KIMI_LOAD_FORMAT" in err.value.message


def test_a_brand_the_release_does_not_record_is_refused():
    launch = build({**ON, "KIMI_HARDWARE": "mi300x"})  # vLLM 0.32.0: is_cuda_alike, so ROCm runs it
    assert launch.plan.processes[-1].kind is Kind.PRELOAD
    data = preload.load_preload()
    only_nvidia = Record("PreloadRelease", {**data.releases["0.32.0"]._fields, "brands": ("nvidia",)})
    data = Record("PreloadFile", {**data._fields, "releases": {"0.32.0": only_nvidia}})
    with pytest.raises(KimiError) as err:
        preload.release(launch.selection, launch.catalog, "single_node", None, data)
    assert err.value.code == UNSUPPORTED_COMBINATION and "AMD" in err.value.message and "NVIDIA" in err.value.message


def _pod(environ) -> dict:
    deployment = next(d for d in documents("k8s", environ) if d and d["kind"] == "Deployment")
    return deployment


def test_kubernetes_draws_a_native_sidecar_sharing_the_sockets_and_the_gpus():
    deployment = _pod(ON)
    validate(deployment)
    pod = deployment["spec"]["template"]["spec"]
    (engine,) = pod["containers"]
    download, sidecar = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar: up before the engine, outlives its restarts
    assert {"name": "KIMI_ROLE", "value": "preload"} in sidecar["env"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in sidecar["env"]
    assert "nvidia.com/gpu" in engine["resources"]["limits"] and "nvidia.com/gpu" not in sidecar["resources"]["limits"]
    engine_mounts = {m["mountPath"]: m["name"] for m in engine["volumeMounts"]}
    sidecar_mounts = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}
    assert sidecar_mounts == engine_mounts  # the cache, /dev/shm and the sockets' volume
    sockets = engine_mounts["/run/weight-cache"]
    assert {"name": sockets, "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert sidecar["startupProbe"]["httpGet"] == {"path": "/health", "port": sidecar["ports"][0]["name"]}
    assert sidecar["ports"][0]["containerPort"] == 8790
    assert "lifecycle" not in sidecar and download["name"] == "download"


def test_kubernetes_without_the_setting_has_no_sidecar():
    pod = _pod({"KIMI_HARDWARE": "h200"})["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["download"]


def test_kubernetes_refuses_what_a_sidecar_cannot_see(monkeypatch):
    with pytest.raises(KimiError) as err:
        render("k8s", {**ON, "KIMI_HARDWARE": "mi300x"})
    assert err.value.code == UNSUPPORTED_COMBINATION and "AMD" in err.value.message and "compose" in err.value.message
    # The sidecar sees every GPU of the node, the engine takes 4: a layout of the recipe's data that
    # takes half a node (the user's --tensor-parallel-size is refused), on a brand whose sidecar
    # could see the GPUs (AMD's data has none: lend it one).
    from entrypoint.render import k8s_pod

    real = k8s_pod.brand
    monkeypatch.setattr(k8s_pod, "brand", lambda launch: Record("Brand", {
        **real(launch)._fields, "k8s_sidecar_gpus_env": {"AMD_VISIBLE_DEVICES": "all"}}))
    half = {**ON, "KIMI_VLLM_VERSION": "0.34.0", "KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4", "KIMI_PROFILE": "inferencex",
            "KIMI_EXTRA_ARGS": "--max-model-len 9472", "KIMI_SKIP_MEMORY_CHECK": "1"}
    with pytest.raises(KimiError) as err:
        render("k8s", half)
    assert err.value.code == UNSUPPORTED_COMBINATION and "takes 4" in err.value.message
    with pytest.raises(KimiError) as err:
        render("k8s", {**ON, "KIMI_EXTRA_ARGS": "--tensor-parallel-size 4", "KIMI_SKIP_MEMORY_CHECK": "1"})
    assert err.value.code == INVALID_VALUE and "KIMI_STRATEGY" in err.value.message


@pytest.mark.parametrize("hardware", ["h200", "mi300x"])
def test_compose_draws_a_companion_service_the_engine_waits_for(hardware):
    doc = yaml.safe_load(render("compose", {**ON, "KIMI_HARDWARE": hardware})[docker_compose.FILE])
    jsonschema.validate(doc, json.loads(COMPOSE_SPEC.read_text()), cls=jsonschema.Draft7Validator)
    services = doc["services"]
    engine, daemon = services["kimi-k2-5"], services["kimi-k2-5-preload"]
    assert engine["depends_on"]["kimi-k2-5-preload"] == {"condition": "service_healthy"}
    assert "kimi-k2-5-preload" not in daemon["depends_on"]
    assert daemon["environment"]["KIMI_ROLE"] == "preload" and daemon["ipc"] == engine["ipc"] == "host"
    gpus = {k: engine[k] for k in ("deploy", "devices") if k in engine}
    assert gpus and all(daemon[k] == v for k, v in gpus.items())  # the same GPUs
    sockets = [v for v in engine["volumes"] if v.endswith(":/run/weight-cache")]
    assert sockets and sockets[0] in daemon["volumes"]
    assert doc["volumes"][sockets[0].split(":")[0]]["driver_opts"]["type"] == "tmpfs"


def test_the_users_loader_config_is_found_by_the_recorded_grammars_destination(monkeypatch):
    """Review (issue 40): the option the engine's socket travels in is looked up in the recorded
    grammar (its `dest`), not derived by editing its string: a grammar whose destination is not the
    option's name (argparse's dest=) still refuses the user's own value."""
    import dataclasses

    from entrypoint.core.vllm.vllm_cli import spec_for

    spec = spec_for("0.32.0")
    option = spec.options["--model-loader-extra-config"]
    monkeypatch.setitem(spec.options, "--model-loader-extra-config", dataclasses.replace(option, dest="loader_config"))
    with pytest.raises(KimiError) as err:
        _ = build({**ON, "KIMI_EXTRA_ARGS": "--model-loader-extra-config {}"}).plan
    assert err.value.code == UNSUPPORTED_COMBINATION and "load every weight from disk" in err.value.message
