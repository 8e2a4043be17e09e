"""Issue 11: every repro of "Edges: no traceback, no hang, no silent wrong launch" as a test.

Each test runs kimi-serve as a user would (in-process through `main`, or a real subprocess where
exec, a non-root UID or a real deadline matters) and asserts the decision documented in
docs/reliability.md."""

from __future__ import annotations

import json
import sys

import pytest

from .harness import base_env, run_cli, run_proc, run_unprivileged
from .servers import Server, endless_body, garbage, healthy, slow_headers, trickled_body

H200 = {"KIMI_HARDWARE": "h200"}
PD_ONE_NODE = {"KIMI_HARDWARE": "b300", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "0",
               "KIMI_DECODE_NODES": "0", "KIMI_PREFILL_ADDRS": "10.0.0.1", "KIMI_DECODE_ADDRS": "10.0.0.1"}
SECRET = "sk-edge-SECRET-1234"


def one_line_error(result, *words):
    """Exit 2 and one `kimi-serve: error:` line naming each of `words`."""
    result.assert_clean({2})
    errors = [line for line in result.err.splitlines() if "error" in line]
    assert errors, result.err
    for word in words:
        assert word in result.err, result.err
    return result


@pytest.fixture()
def no_gpu_tools(tmp_path):
    """PATH with no GPU tool, and a private cache directory."""
    return base_env(KIMI_CACHE_DIR=str(tmp_path / "cache"))


# ---------------------------------------------------------------- tracebacks instead of exit 2


def test_empty_cache_dir_means_the_default(tmp_path):
    env = base_env(**H200, KIMI_CACHE_DIR="")
    run_cli(["doctor", "--format", "json"], env).assert_clean({0, 1})
    run_cli([], {**env, "KIMI_PREFLIGHT": "warn", "KIMI_DRY_RUN": "1"}).assert_clean({0})
    compose = run_cli(["plan", "--format", "compose"], env).assert_clean({0})
    assert "None" not in compose.out and "/cache" in compose.out


@pytest.mark.parametrize("setting", [{"KIMI_CACHE_DIR": "/root/kimi-edge-x"}, {"KIMI_MODEL": "/root/models/kimi"}])
def test_unreadable_paths_as_non_root(setting):
    env = base_env(**H200, **setting)
    if "KIMI_MODEL" in setting:
        env["KIMI_CACHE_DIR"] = "/tmp"
    doctor = run_unprivileged(["doctor"], env).assert_clean({1})
    assert "/root" in doctor.out
    start = run_unprivileged([], env).assert_clean({2})
    assert "/root" in start.err


@pytest.mark.parametrize("name", ["KIMI_NODES", "KIMI_NODE_RANK", "KIMI_PORT", "KIMI_ROUTER_PORT",
                                  "KIMI_PREFILL_NODES", "KIMI_DECODE_DP_RPC_PORT"])
def test_integer_with_5000_digits(name):
    one_line_error(run_cli(["print"], base_env(**H200, **{name: "9" * 5000})), name)


def _bad_vllm(tmp_path, kind):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    target = bindir / "vllm"
    if kind == "directory":
        target.mkdir()
    elif kind == "not executable":
        target.write_text("#!/bin/sh\n")
    else:  # a bad binary
        target.write_bytes(b"\x7fELF\x02\x01\x01garbage")
        target.chmod(0o755)
    return str(bindir)


@pytest.mark.parametrize("kind", ["directory", "not executable", "bad binary"])
def test_vllm_that_cannot_run(tmp_path, kind):
    env = base_env(**H200, KIMI_PREFLIGHT="off", KIMI_CACHE_DIR=str(tmp_path / "c"))
    env["PATH"] = _bad_vllm(tmp_path, kind) + ":/usr/bin:/bin"
    result = run_proc([], env).assert_clean({126, 127})
    assert "vllm" in result.err and "kimi-serve: error:" in result.err


def test_toml_string_with_a_nul(tmp_path):
    config = tmp_path / "k.toml"
    config.write_text('model = "x\\u0000y"\n')
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_CONFIG=str(config))), "model")


def test_config_not_utf8(tmp_path):
    config = tmp_path / "k.toml"
    config.write_bytes(b'model = "\xff\xfe"\n')
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_CONFIG=str(config))), "KIMI_CONFIG")


def test_config_deeply_nested(tmp_path):
    config = tmp_path / "k.toml"
    config.write_text("prefill_addrs = " + "[" * 5000 + "]" * 5000 + "\n")
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_CONFIG=str(config))), "KIMI_CONFIG")


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_batch_file_missing_or_directory(tmp_path, where):
    path = tmp_path / "batch.jsonl"
    if where == "directory":
        path.mkdir()
    one_line_error(run_cli(["plan", "--batch", str(path)], base_env()), str(path))


def test_batch_bad_lines_each_get_an_error_line(tmp_path):
    lines = [b'{"KIMI_HARDWARE": "h200"}', b"\xff", b"[" * 100_000, b"9" * 5000, b"", b'{"KIMI_HARDWARE": "h200"}']
    path = tmp_path / "batch.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = run_cli(["plan", "--batch", str(path)], base_env()).assert_clean({0})
    out = [json.loads(line) for line in result.out.splitlines()]
    assert len(out) == len(lines)
    assert "processes" in out[0] and "processes" in out[-1]
    assert all("error" in entry for entry in out[1:-1])
    proc = run_proc(["plan", "--batch", "-"], base_env(), stdin=b"\n".join(lines) + b"\n").assert_clean({0})
    assert len(proc.out.splitlines()) == len(lines)


def test_batch_keeps_a_line_per_line():
    lines = ['{"KIMI_HARDWARE": "h200"}', ""] * 8
    result = run_cli(["plan", "--batch", "-"], base_env(), stdin="\n".join(lines) + "\n").assert_clean({0})
    assert len(result.out.splitlines()) == 16


NVIDIA_GARBAGE = {
    "superscript index": "\u00b2, NVIDIA H200, 143771, GPU-a\n",
    "400-digit memory": "0, NVIDIA H200, " + "9" * 400 + ", GPU-a\n",
    "huge float": "0, NVIDIA H200, 1e999, GPU-a\n",
}
AMD_GARBAGE = {
    "deeply nested": "[" * 100_000 + "]" * 100_000,
    "huge numbers": json.dumps([{"gpu": int("9" * 500), "asic": {"market_name": "MI300X"},
                                 "vram": {"size": {"value": int("9" * 500), "unit": "MB"}}}]),
    "huge float": '[{"gpu": 1e999, "asic": {"market_name": "MI300X"}, "vram": {"size": "1e999 MB"}}]',
}


def _tool(tmp_path, name, text):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    out = tmp_path / f"{name}.out"
    out.write_text(text)
    exe = bindir / name
    exe.write_text(f"#!/bin/sh\nexec /bin/cat {out}\n")
    exe.chmod(0o755)
    return str(bindir)


@pytest.mark.parametrize("tool,text", [("nvidia-smi", t) for t in NVIDIA_GARBAGE.values()]
                         + [("amd-smi", t) for t in AMD_GARBAGE.values()],
                         ids=[f"nvidia-smi {k}" for k in NVIDIA_GARBAGE] + [f"amd-smi {k}" for k in AMD_GARBAGE])
def test_fake_gpu_tools_with_garbage(tmp_path, tool, text):
    env = base_env(KIMI_HARDWARE="auto", KIMI_CACHE_DIR=str(tmp_path / "c"))
    env["PATH"] = _tool(tmp_path, tool, text) + ":/usr/bin:/bin"
    run_cli(["doctor"], env).assert_clean({0, 1})
    run_cli(["print"], env).assert_clean({0, 2})
    run_cli([], {**env, "KIMI_DRY_RUN": "1"}).assert_clean({0, 2})


def test_slurm_nodelist_with_letters():
    env = base_env(**H200, KIMI_STRATEGY="multi_node_tp", SLURM_NNODES="2", SLURM_NODEID="0",
                   SLURM_JOB_NODELIST="gpu[a-b]", KIMI_IFACE="eth0")
    one_line_error(run_cli(["print"], env), "SLURM_JOB_NODELIST")


def test_slurm_huge_range_is_bounded():
    env = base_env(**H200, KIMI_STRATEGY="multi_node_tp", SLURM_NNODES="2", SLURM_NODEID="0",
                   SLURM_JOB_NODELIST="gpu[0-99999999999999]", KIMI_IFACE="eth0")
    result = run_proc(["print"], env).assert_clean({0, 2})
    assert result.seconds < 30  # a bound (the subprocess timeout is the real one), not a speed target


def test_healthcheck_against_non_http_bytes():
    with Server(garbage) as srv:
        result = run_cli(["healthcheck", "--timeout", "3"], base_env(**H200, KIMI_PORT=str(srv.port)))
    result.assert_clean({1})
    assert result.out.startswith("unhealthy")


@pytest.mark.parametrize("value", ["-1", "inf", "nan", "0"])
def test_healthcheck_bad_timeout(value):
    result = run_cli(["healthcheck", "--timeout", value], base_env(**H200)).assert_clean({1})
    assert "--timeout" in result.text


def test_verify_with_a_broken_url():
    one_line_error(run_cli(["verify", "--url", "http://[::1", "--expect-model", "m", "--features", ""], base_env()),
                   "--url")


def test_ipv6_host_is_bracketed():
    from entrypoint.app.verify import verify_targets

    assert verify_targets(True, False, base_env(**H200, KIMI_HOST="::1")).expected.url == "http://[::1]:8000"


def test_verify_without_httpx():
    with Server(healthy) as srv:
        code = ("import sys; sys.modules['httpx'] = None; from entrypoint.cli import main; "
                f"main(['verify', '--url', '{srv.url}', '--expect-model', 'm', '--features', '', '--timeout', '3'])")
        import subprocess

        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**base_env(), "PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[2])})
    assert "Traceback" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr, proc.stderr
    assert proc.returncode in (1, 2)


@pytest.mark.parametrize("where", ["file", "under a file"])
def test_plan_output_not_a_directory(tmp_path, where):
    target = tmp_path / "f"
    target.write_text("")
    output = target if where == "file" else target / "sub"
    one_line_error(run_cli(["plan", "--format", "compose", "--output", str(output)], base_env(**H200)), str(target))


def test_plan_output_unwritable():
    result = run_unprivileged(["plan", "--format", "compose", "--output", "/root/kimi-edge-out"], base_env(**H200))
    one_line_error(result, "/root/kimi-edge-out")


# ---------------------------------------------------------------- hangs and unbounded memory


@pytest.mark.parametrize("env", [
    {"KIMI_NODES": "1000000000", "KIMI_HEAD_ADDR": "10.0.0.1", "KIMI_IFACE": "eth0"},
    {**PD_ONE_NODE, "KIMI_PREFILL_NODES": "999999999"},
], ids=["nodes", "prefill_nodes"])
def test_huge_node_counts(env):
    one_line_error(run_cli(["print"], base_env(**{**H200, **env})), "at most")


def test_k8s_with_65535_nodes():
    env = base_env(**H200, KIMI_NODES="65535", KIMI_STRATEGY="multi_node_tp")
    one_line_error(run_cli(["plan", "--format", "k8s"], env), "KIMI_NODES")


@pytest.mark.slow
def test_healthcheck_total_deadline_against_slow_headers():
    with Server(slow_headers, lifetime_s=120) as srv:
        result = run_proc(["healthcheck", "--timeout", "2"], base_env(**H200, KIMI_PORT=str(srv.port)), timeout=30)
    result.assert_clean({1})
    assert result.seconds < 10


@pytest.mark.slow
@pytest.mark.parametrize("behaviour", [trickled_body, endless_body], ids=["trickled", "endless"])
def test_verify_total_deadline_and_size_cap(behaviour):
    with Server(behaviour, lifetime_s=120) as srv:  # outlives the bound: only the client can end it
        result = run_proc(["verify", "--url", srv.url, "--expect-model", "m", "--features", "", "--timeout", "2"],
                          base_env(), timeout=60)
    result.assert_clean({1})
    assert "2 s" in result.out or "larger than" in result.out
    # /health is the first request; it fails within its 2 s and blocks the rest: a bound, not a speed
    assert result.seconds < 30


# ---------------------------------------------------------------- wrong results with exit 0


def test_pd_one_node_same_port_for_both_pools():
    # a --port of the user's (both pools would take it) is refused outright: the port is KIMI_PORT's
    env = base_env(**PD_ONE_NODE, KIMI_ROLE="prefill", KIMI_EXTRA_ARGS="--port 9999")
    one_line_error(run_cli(["print"], env), "--port", "KIMI_PORT")
    # KIMI_PORT moves the API; each pool keeps a port of its own, so a shared node still plans
    run_cli(["print"], base_env(**PD_ONE_NODE, KIMI_ROLE="prefill", KIMI_PORT="9999")).assert_clean({0})
    # a typed port that lands on the other pool's is refused
    one_line_error(run_cli(["print"], base_env(**PD_ONE_NODE, KIMI_ROLE="prefill", KIMI_DECODE_DP_RPC_PORT="8001")),
                   "port 8001")


def test_router_with_container_args():
    one_line_error(run_cli(["print", "--max-model-len", "4096"], base_env(**PD_ONE_NODE, KIMI_ROLE="router")),
                   "router")


def test_router_notes_extra_args_it_does_not_take():
    env = base_env(**PD_ONE_NODE, KIMI_ROLE="router", KIMI_EXTRA_ARGS="--max-model-len 4096", KIMI_DRY_RUN="1",
                   KIMI_PREFLIGHT="off")
    result = run_cli([], env).assert_clean({0})
    assert "KIMI_EXTRA_ARGS" in result.err


def test_ipv6_pool_addresses_are_bracketed_for_the_router():
    env = base_env(**{**PD_ONE_NODE, "KIMI_PREFILL_ADDRS": "fd00::1", "KIMI_DECODE_ADDRS": "fd00::1"},
                   KIMI_ROLE="router")
    out = run_cli(["print", "--format", "json"], env).assert_clean({0}).out
    argv = json.loads(out)["argv"]
    assert "http://[fd00::1]:8001" in argv and "http://[fd00::1]:8002" in argv


def test_healthcheck_asks_the_configured_host():
    with Server(healthy, host="127.0.0.2") as srv:
        result = run_cli(["healthcheck", "--timeout", "3"],
                         base_env(**H200, KIMI_HOST="127.0.0.2", KIMI_PORT=str(srv.port)))
    result.assert_clean({0})
    assert "127.0.0.2" in result.out


@pytest.mark.parametrize("name", ["Kimi_Prod", "a b", "x" * 300, "null:", "-a", "a-"])
def test_deployment_name_is_validated(name):
    one_line_error(run_cli(["plan", "--format", "k8s"], base_env(**H200, KIMI_NAME=name)), "KIMI_NAME")


def test_empty_name_is_the_default():
    result = run_cli(["plan", "--format", "compose"], base_env(**H200, KIMI_NAME="")).assert_clean({0})
    assert "kimi-k2-5" in result.out


@pytest.mark.parametrize("args,hint", [(["doctr", "--format", "json"], "doctor"), (["prnt"], "print"),
                                       (["bash"], "--entrypoint")])
def test_mistyped_command_is_not_a_vllm_argument(args, hint):
    one_line_error(run_cli(args, base_env(**H200, KIMI_PREFLIGHT="off")), hint)


def test_print_dash_h_is_help():
    result = run_cli(["print", "-h"], base_env(**H200)).assert_clean({0})
    assert "Usage" in result.out and "vllm serve" not in result.out


def test_cache_dir_naming_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_text("")
    env = base_env(**H200, KIMI_CACHE_DIR=str(path))
    doctor = run_cli(["doctor", "--format", "json"], env).assert_clean({1})
    cache = [c for c in json.loads(doctor.out)["checks"] if c["check"] == "cache"][0]
    assert cache["status"] == "error" and "not a directory" in cache["message"]
    one_line_error(run_cli([], {**env, "KIMI_PREFLIGHT": "off"}), "not a directory")


def test_toml_table_as_address_list(tmp_path):
    config = tmp_path / "k.toml"
    config.write_text("prefill_addrs = {a=1}\n")
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_CONFIG=str(config))), "prefill_addrs")


def test_setting_name_one_edit_away_is_an_error():
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_VARIANTS="mxfp4")), "KIMI_VARIANT")


def test_unknown_setting_warns_on_every_command():
    for args in (["list"], ["print"], ["plan"]):
        result = run_cli(args, base_env(**H200, KIMI_SOMETHING_ELSE="1")).assert_clean({0})
        assert "KIMI_SOMETHING_ELSE" in result.err


def test_kubernetes_service_links_stay_harmless():
    env = base_env(**H200, KIMI_SERVICE_HOST="10.0.0.9", KIMI_SERVICE_PORT="8000",
                   KIMI_PORT_8000_TCP="tcp://10.0.0.9:8000", KIMI_PORT_8000_TCP_ADDR="10.0.0.9")
    result = run_cli(["print"], env).assert_clean({0})
    assert "KIMI_SERVICE_HOST" not in result.err


def test_dry_run_on_a_node_without_gpus(no_gpu_tools):
    result = run_cli([], {**no_gpu_tools, **H200, "KIMI_DRY_RUN": "1"}).assert_clean({0})
    assert "vllm serve" in result.err


def test_json_log_format_covers_the_launch_and_errors(no_gpu_tools):
    env = {**no_gpu_tools, **H200, "KIMI_DRY_RUN": "1", "KIMI_LOG_FORMAT": "json"}
    ok = run_cli([], env).assert_clean({0})
    records = [json.loads(line) for line in ok.err.splitlines()]
    assert any(r["event"] == "launch" and r.get("argv") for r in records)
    bad = run_cli([], {**env, "KIMI_NODES": "x"}).assert_clean({2})
    records = [json.loads(line) for line in bad.err.splitlines()]
    assert records[-1]["level"] == "error" and "KIMI_NODES" in records[-1]["message"]


def test_secret_in_unbalanced_extra_args():
    result = one_line_error(run_cli(["print"], base_env(**H200, KIMI_EXTRA_ARGS=f"--api-key {SECRET} '")),
                            "KIMI_EXTRA_ARGS")
    assert SECRET not in result.text


def test_secret_in_toml_extra_args(tmp_path):
    config = tmp_path / "k.toml"
    config.write_text(f'extra_args = ["--api-key", "{SECRET}"]\n')
    ok = run_cli(["print"], base_env(**H200, KIMI_CONFIG=str(config))).assert_clean({0})
    assert "--api-key" in ok.out and SECRET not in ok.text
    config.write_text(f'extra_args = {{key = "--api-key {SECRET}"}}\n')
    bad = one_line_error(run_cli(["print"], base_env(**H200, KIMI_CONFIG=str(config))), "extra_args")
    assert SECRET not in bad.text


# ---------------------------------------------------------------- the guard itself


def test_unexpected_bug_is_one_line_unless_debug(monkeypatch):
    def broken(args, termination_log=""):
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr("entrypoint.app.serve.start", broken)
    result = run_cli([], base_env(**H200)).assert_clean({3})
    assert result.err.count("\n") == 1 and "please report" in result.err and "KIMI_DEBUG=1" in result.err
    debug = run_cli([], base_env(**H200, KIMI_DEBUG="1"))
    assert debug.code == 3 and "Traceback" in debug.err and "something nobody foresaw" in debug.err


def test_a_platform_start_command_is_not_a_typo():
    """SageMaker runs `docker run IMAGE serve` (recipes/platforms.yaml detect.args): consumed, never an error."""
    result = run_cli(["serve"], base_env(**H200, KIMI_DRY_RUN="1", KIMI_PREFLIGHT="off")).assert_clean({0})
    assert "vllm serve" in result.err and "not a kimi-serve command" not in result.err
