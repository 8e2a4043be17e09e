"""Cache layout at the exec edge, node facts about the cache, and the start-up log."""

from __future__ import annotations

import io
import json

from entrypoint.app.launch import build
from entrypoint.node.cache import cache_env, weights_present
from entrypoint.node.logs import Entry, StartLog, log_decisions
from entrypoint.node.facts import cache_facts


def test_hf_and_vllm_caches_under_the_mount(tmp_path):
    env = cache_env(str(tmp_path), {"HOME": str(tmp_path)})
    assert env == {"HF_HOME": f"{tmp_path}/huggingface", "VLLM_CACHE_ROOT": f"{tmp_path}/vllm"}


def test_modelscope_when_asked(tmp_path):
    env = cache_env(str(tmp_path), {"HOME": str(tmp_path), "VLLM_USE_MODELSCOPE": "true"})
    assert env["MODELSCOPE_CACHE"] == f"{tmp_path}/modelscope"


def test_user_values_are_kept(tmp_path):
    env = cache_env(str(tmp_path), {"HOME": str(tmp_path), "HF_HOME": "/models/hf"})
    assert "HF_HOME" not in env and env["VLLM_CACHE_ROOT"] == f"{tmp_path}/vllm"


def test_unwritable_home_moves_under_the_cache(tmp_path):
    assert cache_env(str(tmp_path), {"HOME": "/nonexistent"})["HOME"] == f"{tmp_path}/home"
    assert cache_env(str(tmp_path), {})["HOME"] == f"{tmp_path}/home"
    assert cache_env("/nonexistent-cache", {"HOME": "/nonexistent"})["HOME"] == "/tmp"


def test_plan_env_stays_the_recipes():
    proc = build({"KIMI_HARDWARE": "h200", "KIMI_CACHE_DIR": "/somewhere"}).this_process()
    assert not {"HF_HOME", "VLLM_CACHE_ROOT", "HOME"} & set(proc.env)


def _snapshot(root, repo):
    snap = root / "huggingface" / "hub" / ("models--" + repo.replace("/", "--")) / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "model-00001-of-00064.safetensors").write_text("x")
    return snap


def test_weights_present_in_the_hf_cache(tmp_path):
    assert weights_present("moonshotai/Kimi-K2.5", str(tmp_path), {"HOME": str(tmp_path)}) is None
    _snapshot(tmp_path, "moonshotai/Kimi-K2.5")
    assert weights_present("moonshotai/Kimi-K2.5", str(tmp_path), {"HOME": str(tmp_path)}) is not None


def test_weights_present_in_modelscope_cache_and_local_path(tmp_path):
    ms = tmp_path / "modelscope" / "models" / "moonshotai" / "Kimi-K2.5"
    ms.mkdir(parents=True)
    (ms / "model.safetensors").write_text("x")
    env = {"HOME": str(tmp_path), "VLLM_USE_MODELSCOPE": "1"}
    assert weights_present("moonshotai/Kimi-K2.5", str(tmp_path), env) == ms
    assert weights_present(str(ms), "/nonexistent", {}) == ms


def test_cache_facts_find_the_mount(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mounts").write_text(f"overlay / overlay rw 0 0\n/dev/sdb1 {tmp_path} xfs rw 0 0\n")
    _snapshot(tmp_path, "moonshotai/Kimi-K2.5")
    facts = cache_facts(str(tmp_path / "not-yet"), "moonshotai/Kimi-K2.5", {"HOME": str(tmp_path)}, str(proc))
    assert (facts.mount_point, facts.fs_type, facts.writable) == (str(tmp_path), "xfs", True)
    assert facts.free_bytes > 0 and facts.weights_dir is None  # the weights are under the other cache dir


def test_json_log_lines_and_masked_secrets():
    out = io.StringIO()
    log = StartLog("json", {"HF_TOKEN": "hf_verysecret"}, out)
    log.emit(Entry("preflight.cache", "token hf_verysecret leaked?", "warning", {"env": {"HF_TOKEN": "hf_verysecret"}}))
    record = json.loads(out.getvalue())
    assert record["level"] == "warning" and record["event"] == "preflight.cache"
    assert "hf_verysecret" not in out.getvalue() and record["env"]["HF_TOKEN"] == "****"


def test_text_log_lines():
    out = io.StringIO()
    StartLog("text", {}, out).warning("x", "something")
    assert out.getvalue() == "kimi-serve: warning: something\n"


def test_start_decisions_name_hardware_cluster_and_cache(tmp_path, monkeypatch):
    monkeypatch.setattr("entrypoint.node.cluster.default_route_iface", lambda proc_root="/proc": "eth9")
    env = {"KIMI_HARDWARE": "h200", "LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_GROUP_SIZE": "2",
           "LWS_WORKER_INDEX": "1", "KIMI_CACHE_DIR": str(tmp_path), "HOME": str(tmp_path), "KIMI_LOG_FORMAT": "json"}
    from entrypoint.app.launch import load_launch

    out = io.StringIO()
    log_decisions(load_launch((), env), env, out)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "hardware" and "cluster" in kinds and kinds[-1] == "cache"
    rank = next(e for e in events if e["event"] == "cluster" and "rank" in e)
    assert (rank["rank"], rank["nodes"], rank["head"], rank["iface"]) == (1, 2, "10.0.0.1", "eth9")
