"""The console script as a user meets it: real subprocesses, a real exec of a recording `vllm`."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

RECORDER = textwrap.dedent("""\
    #!{python}
    import json, os, sys
    with open(os.environ["RECORD_TO"], "w") as fh:
        json.dump({{"argv": sys.argv, "env": dict(os.environ), "pid": os.getpid()}}, fh)
""")


def run(args, env, **kw):
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "KIMI_PREFLIGHT": "off"}
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], env={**base, **env}, capture_output=True,
                          text=True, timeout=60, **kw)


@pytest.fixture()
def fake_vllm(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("vllm", "vllm-router"):
        exe = bindir / name
        exe.write_text(RECORDER.format(python=sys.executable))
        exe.chmod(0o755)
    # the exec edge makes the cache's directories: KIMI_CACHE_DIR in tmp, never the host's /cache
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "RECORD_TO": str(tmp_path / "record.json"),
            "KIMI_CACHE_DIR": str(tmp_path / "cache")}, tmp_path


def test_launch_execs_the_printed_argv_and_keeps_user_env(fake_vllm):
    paths, tmp = fake_vllm
    env = {**paths, "KIMI_HARDWARE": "mi300x", "VLLM_ROCM_USE_AITER": "0", "HF_TOKEN": "hf_secretvalue123"}
    printed = json.loads(run(["print", "--format", "json", "--max-model-len", "4096"], env).stdout)
    proc = run(["--max-model-len", "4096"], env)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp / "record.json").read_text())
    assert record["argv"][1:] == printed["argv"][1:]
    assert record["argv"][-2:] == ["--max-model-len", "4096"]
    assert record["env"]["VLLM_ROCM_QUICK_REDUCE_QUANTIZATION"] == "INT4"
    assert record["env"]["VLLM_ROCM_USE_AITER"] == "0", "a variable the user set is kept"
    assert "VLLM_ROCM_USE_AITER" not in printed["env"]
    assert "hf_secretvalue123" not in proc.stderr
    assert "vllm serve moonshotai/Kimi-K2.5" in proc.stderr


def test_exec_replaces_the_process(fake_vllm):
    paths, tmp = fake_vllm
    child = subprocess.Popen([sys.executable, "-m", "entrypoint"], env={**os.environ, **paths, "KIMI_HARDWARE": "h200", "KIMI_PREFLIGHT": "off"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.communicate(timeout=60)
    assert json.loads((tmp / "record.json").read_text())["pid"] == child.pid


def test_pd_router_role_execs_vllm_router(fake_vllm):
    paths, tmp = fake_vllm
    env = {**paths, "KIMI_HARDWARE": "b200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "0",
           "KIMI_DECODE_NODES": "0", "KIMI_PREFILL_ADDRS": "127.0.0.1", "KIMI_DECODE_ADDRS": "127.0.0.1",
           "KIMI_ROLE": "router"}
    assert run([], env).returncode == 0
    argv = json.loads((tmp / "record.json").read_text())["argv"]
    assert os.path.basename(argv[0]) == "vllm-router" and "http://127.0.0.1:8001" in argv


def test_dry_run_does_not_exec(fake_vllm):
    paths, tmp = fake_vllm
    proc = run([], {**paths, "KIMI_HARDWARE": "h200", "KIMI_DRY_RUN": "1"})
    assert proc.returncode == 0 and "--tensor-parallel-size 8" in proc.stderr
    assert not (tmp / "record.json").exists()


@pytest.mark.parametrize("env, words", [
    ({"KIMI_HARDWARE": "h20"}, ["KIMI_HARDWARE='h20'", "h200", "Did you mean"]),
    ({"KIMI_HARDWARE": "h100"}, ["714", "640", "KIMI_NODES=2"]),
    ({"KIMI_HARDWARE": "h200", "KIMI_VARIANT": "nvfp4"}, ["blackwell", "KIMI_VARIANT=default"]),
    ({"KIMI_HARDWARE": "h200", "KIMI_NODES": "2"}, ["KIMI_HEAD_ADDR"]),
    ({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": "p",
      "KIMI_DECODE_ADDRS": "d"}, ["KIMI_ROLE"]),
    ({"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": "--x 'unterminated"}, ["KIMI_EXTRA_ARGS", "quotes"]),
    ({"KIMI_CONFIG": "/nonexistent/kimi.toml"}, ["KIMI_CONFIG", "cannot read"]),
])
def test_bad_input_is_one_message_and_exit_2(fake_vllm, env, words):
    paths, tmp = fake_vllm
    for args in ([], ["print"]):
        proc = run(args, {**paths, **env})
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kimi-serve: error: ")
        for word in words:
            assert word in proc.stderr
    assert not (tmp / "record.json").exists()


def test_plan_json_every_rank():
    env = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "multi_node_dep", "KIMI_NODES": "3",
           "KIMI_HEAD_ADDR": "10.1.1.1", "KIMI_IFACE": "eth0"}
    out = json.loads(run(["plan", "--format", "json"], env).stdout)
    assert [(p["role"], p["rank"]) for p in out["processes"]] == [("head", 0), ("worker", 1), ("worker", 2)]


def test_batch_errors_do_not_stop_the_batch(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"KIMI_HARDWARE": "h200"}\nnot json\n{"KIMI_HARDWARE": "h100"}\n{"KIMI_HARDWARE": "mi355x"}\n')
    lines = [json.loads(x) for x in run(["plan", "--batch", str(src)], {}).stdout.splitlines()]
    assert [("error" in x) for x in lines] == [False, True, True, False]
    assert lines[1]["error"]["code"] == "invalid_value"
    assert lines[2]["error"]["code"] == "insufficient_memory"


def test_secrets_masked_in_print_and_explain():
    env = {"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": "--api-key sk-abcdef123456"}
    for args in (["print"], ["print", "--format", "json"], ["explain"], ["plan"]):
        out = run(args, env)
        assert out.returncode == 0 and "sk-abcdef123456" not in out.stdout + out.stderr
        assert "****" in out.stdout


def test_explain_names_every_layer():
    env = {"KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4", "KIMI_PROFILE": "aiter-mxfp4",
           "KIMI_EXTRA_ARGS": "--max-model-len 4096", "KIMI_MODEL": "/models/k"}
    out = run(["explain"], env).stdout
    for line_start, source in (("--trust-remote-code", "base"), ("--tensor-parallel-size 8", "strategy"),
                               ("--reasoning-parser kimi_k2", "feature:reasoning"),
                               ("--block-size 16", "profile:aiter-mxfp4"), ("--max-model-len 4096", "user"),
                               ("--served-model-name", "settings"), ("VLLM_ROCM_USE_AITER_MOE=1", "variant")):
        line = next(x for x in out.splitlines() if x.strip().startswith(line_start))
        assert line.rstrip().endswith(source), line


def test_list_shows_valid_combinations():
    out = json.loads(run(["list", "--format", "json"], {}).stdout)
    assert out["hardware"]["h100"]["variants"]["default"] == ">= 2 nodes"
    assert out["hardware"]["mi355x"]["variants"]["mxfp4"] == "1 node"
    assert out["hardware"]["h200"]["variants"]["nvfp4"] == "-"
    assert out["hardware"]["gb200"]["arch"] == "arm64"
    assert "encoder_parallel" not in out["hardware"]["gb200"]["default_features"]
    assert run(["--help"], {}).stdout.count("\n  ") >= 7


def test_a_short_recipe_name_gets_the_full_one_suggested():
    """Issue 40: `KIMI_RECIPE=k3` suggests kimi-k3 (difflib alone finds no match that short)."""
    from entrypoint.app.launch import build as _build
    from entrypoint.core.base.errors import KimiError

    with pytest.raises(KimiError, match=r"Did you mean 'kimi-k3'\?"):
        _build({"KIMI_RECIPE": "k3", "KIMI_HARDWARE": "h200"})
    with pytest.raises(KimiError, match=r"Did you mean 'kimi-k2.5'\?"):
        _build({"KIMI_RECIPE": "K2.5", "KIMI_HARDWARE": "h200"})


@pytest.mark.parametrize("setting, typed, meant", [
    ("KIMI_HARDWARE", "h20", "h200"), ("KIMI_STRATEGY", "single_node_pt", "single_node_tp"),
    ("KIMI_VARIANT", "nvfp", "nvfp4"), ("KIMI_PREFLIGHT", "warm", "warn"), ("KIMI_ROLE", "prefil", "prefill"),
    ("KIMI_KV_OFFLOAD", "lmcach", "lmcache"), ("KIMI_ROUTER_POLICY", "round-robin", "round_robin"),
    ("KIMI_LOAD_FORMAT", "fastsafetensor", "fastsafetensors"), ("KIMI_FEATURES", "+tool_caling", "tool_calling"),
])
def test_an_unknown_choice_suggests_the_nearest_valid_one(setting, typed, meant):
    """Issue 40: every setting with a list of valid values names the nearest one to a near miss."""
    from entrypoint.app.launch import build as _build
    from entrypoint.core.base.errors import KimiError

    env = {"KIMI_HARDWARE": "h200", setting: typed}
    if setting == "KIMI_ROUTER_POLICY":
        env["KIMI_REPLICAS"] = "2"
    with pytest.raises(KimiError) as err:
        _ = _build(env).plan
    assert f"Did you mean '{meant}'?" in err.value.message and err.value.exit_code == 2, err.value.message


def test_a_two_node_plan_says_which_interface_it_uses(monkeypatch):
    """Issue 40: without KIMI_IFACE, a multi-node plan printed here uses this machine's interface;
    it says so, with the way out, instead of rendering it silently."""
    from click.testing import CliRunner

    from entrypoint.cli import plan
    from entrypoint.node import cluster

    monkeypatch.setattr(cluster, "resolve_iface", lambda head, proc_root="/proc": ("ens5", "the default route's interface"))
    for key in ("KIMI_IFACE", "KIMI_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    env = {"KIMI_HARDWARE": "h200", "KIMI_NODES": "2", "KIMI_HEAD_ADDR": "10.0.0.1"}
    result = CliRunner().invoke(plan.command, [], env=env)
    assert result.exit_code == 0 and "GLOO_SOCKET_IFNAME=ens5" in result.output
    assert ("kimi-serve: note: KIMI_IFACE is unset: this plan uses ens5 (the default route's interface on this "
            "machine)") in result.output and "Set KIMI_IFACE" in result.output
    quiet = CliRunner().invoke(plan.command, [], env={**env, "KIMI_IFACE": "eth9"})
    assert quiet.exit_code == 0 and "note:" not in quiet.output


def test_a_missing_head_address_gets_an_example_and_the_schedulers_that_fill_it():
    """Issue 40: the KIMI_HEAD_ADDR error shows an example and says a LeaderWorkerSet or Slurm fills it."""
    from entrypoint.app.launch import build
    from entrypoint.core.base.errors import KimiError

    with pytest.raises(KimiError) as info:
        build({"KIMI_HARDWARE": "h200", "KIMI_NODES": "2", "KIMI_IFACE": "eth0"})
    assert "e.g. KIMI_HEAD_ADDR=10.0.0.1" in info.value.message
    assert "LWS_LEADER_ADDRESS" in info.value.message and "first host of a Slurm job's SLURM_JOB_NODELIST" in \
        info.value.message and "SKYPILOT_NODE_IPS" in info.value.message  # every scheduler node/cluster.py reads
    # a Slurm host list that names no head: the same example and the list's form
    from entrypoint.app.launch import load_launch

    with pytest.raises(KimiError) as info:
        load_launch((), {"KIMI_HARDWARE": "h200", "KIMI_IFACE": "eth0", "SLURM_NNODES": "2", "SLURM_NODEID": "0",
                         "SLURM_JOB_NODELIST": "gpu[04-01]"})
    assert "e.g. KIMI_HEAD_ADDR=10.0.0.1" in info.value.message and "gpu[01-04]" in info.value.message


@pytest.mark.parametrize("fmt", ["k8s", "skypilot"])
def test_a_rendered_two_node_deployment_never_bakes_this_machines_interface(monkeypatch, fmt):
    """Issue 40: without KIMI_IFACE, a rendering for other machines does not use this machine's
    interface: its containers get KIMI_IFACE=auto (each finds its own at its start and logs it), and
    plan says so in one note naming the setting."""
    from click.testing import CliRunner

    from entrypoint.cli import plan
    from entrypoint.node import cluster

    monkeypatch.setattr(cluster, "resolve_iface", lambda head, proc_root="/proc": ("ens5", "the default route's interface"))
    for key in ("KIMI_IFACE", "KIMI_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    env = {"KIMI_HARDWARE": "h200", "KIMI_NODES": "2", "KIMI_HEAD_ADDR": "10.0.0.1"}
    result = CliRunner().invoke(plan.command, ["--format", fmt], env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "ens5" not in result.stdout + result.stderr and "KIMI_IFACE" in result.stdout
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(
        "kimi-serve: note: KIMI_IFACE is unset: the rendered containers run with KIMI_IFACE=auto")
    named = CliRunner().invoke(plan.command, ["--format", fmt], env={**env, "KIMI_IFACE": "ib0"})
    assert named.exit_code == 0 and "ib0" in named.stdout and named.stderr == ""


def test_a_two_node_plan_here_with_no_interface_found_refuses_naming_kimi_iface(monkeypatch):
    """Issue 40: where this machine's routing finds no interface, a two-node plan (or a node's start)
    refuses with the setting that fixes it, instead of a launch without one."""
    from click.testing import CliRunner

    from entrypoint.cli import plan
    from entrypoint.node import cluster

    monkeypatch.setattr(cluster, "resolve_iface", lambda head, proc_root="/proc": (None, "no default route"))
    for key in ("KIMI_IFACE", "KIMI_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    result = CliRunner().invoke(plan.command, [], env={"KIMI_HARDWARE": "h200", "KIMI_NODES": "2",
                                                                        "KIMI_HEAD_ADDR": "10.0.0.1"})
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "KIMI_IFACE is required for this configuration" in result.stderr and "e.g. eth0" in result.stderr


def test_plan_time_creates_no_directory(tmp_path):
    """Issue 40: only the exec edge (and a download) makes the cache's directories: print, plan,
    explain and the renderings leave a missing KIMI_CACHE_DIR missing."""
    cache = tmp_path / "cache"
    env = {"KIMI_HARDWARE": "h200", "KIMI_CACHE_DIR": str(cache), "HOME": str(tmp_path / "home")}
    for args in (["print"], ["plan"], ["explain"], ["plan", "--format", "k8s"], ["plan", "--format", "compose"]):
        proc = run(args, env, cwd=tmp_path)
        assert proc.returncode == 0, (args, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())
