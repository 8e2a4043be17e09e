"""Issue 49 (edges, round six), one test per class beyond the side doors (tests/edges/test_wiring.py):
cpu named wherever the hardware ids are and its memory check counting what vLLM allocates; a local
model without weights named with the reason; a multi-node head's ports counted with its peer watch
and master port; a credential in any part of a URL (userinfo, query) masked in every message and
refused in every rendering; every message one line whatever a value holds; the project's own helper
variables never taken for settings. (Facts copied from the s6-* repros; nothing read from outside.)"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from entrypoint.core.compose.settings import BY_ENV, HELPER_VARIABLES, check_names
from entrypoint.core.vllm.mask import mask_output, mask_value

from tests.edges.harness import base_env, run_cli

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_Sw6QueryTok3nXYZ"


def cli(args, **env):
    return run_cli(args, env=base_env(**env)).assert_clean()


# ---------------------------------------------------------------- cpu, first class

@pytest.mark.parametrize("value", ["CPU", "cpux", "Cpu"])
def test_cpu_is_among_the_valid_hardware_with_a_did_you_mean(value):
    done = cli(["print"], KIMI_HARDWARE=value)
    assert done.code == 2 and re.search(r"Valid values:[^.]*\bcpu\b", done.err) and "Did you mean 'cpu'?" in done.err


@pytest.mark.parametrize("value", ["auto", ""])
def test_cpu_is_offered_where_no_gpu_is_found_or_none_is_set(value):
    done = cli(["print"], KIMI_HARDWARE=value)
    assert done.code == 2 and re.search(r"\bcpu\b", done.err), done.err


def test_list_and_the_settings_table_name_cpu():
    assert "cpu" in json.loads(cli(["list", "--format", "json"]).out)["hardware"]
    assert re.search(r"^cpu\s", cli(["list"]).out, re.M)
    assert re.search(r"^\| `KIMI_HARDWARE` \| Hardware id: [^|]*\bcpu\b", (ROOT / "README.md").read_text(), re.M)


@pytest.fixture()
def tiny(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"\0" * 4096)
    return tmp_path / "m"


@pytest.mark.parametrize("extra", [{"KIMI_CPU_KVCACHE_GIB": "64"}, {"KIMI_CPU_RANKS": "16"},
                                   {"KIMI_CPU_RANKS": "4", "KIMI_CPU_KVCACHE_GIB": "32"}])
@pytest.mark.parametrize("cmd", [["print"], ["plan", "--format", "k8s"]])
def test_the_cpu_memory_check_counts_each_ranks_kv_cache(tiny, extra, cmd):
    declared = {"KIMI_MODEL_GB": "1"} if cmd[0] == "plan" else {}  # a rendering reads no file of the model
    done = cli(cmd, KIMI_HARDWARE="cpu", KIMI_MODEL=str(tiny), KIMI_CPU_MEMORY_GB="8", **extra, **declared)
    assert done.code == 2 and "KIMI_CPU_KVCACHE_GIB" in done.err and "KIMI_CPU_RANKS" in done.err


# ---------------------------------------------------------------- a local model without weights

def _paths(tmp: Path) -> list:
    for name in ("empty", "cfg", "fifo", "loop", "dangling"):
        (tmp / name).mkdir()
    (tmp / "cfg" / "config.json").write_text("{}")
    (tmp / "file").write_text("x")
    os.mkfifo(tmp / "fifo" / "model.safetensors")
    (tmp / "loop" / "model.safetensors").symlink_to("model.safetensors")
    (tmp / "dangling" / "model.safetensors").symlink_to("/nonexistent/x")
    return [(tmp / "missing", "does not exist"), (tmp / "empty", "holds no weights"), (tmp / "cfg", "holds no weights"),
            (tmp / "file", "not a directory"), (tmp / "fifo", "FIFO"), (tmp / "loop", "link loop"),
            (tmp / "dangling", "dangling link")]


def test_a_local_model_without_weights_is_named_with_the_reason(tmp_path):
    for path, why in _paths(tmp_path):
        done = cli(["print"], KIMI_HARDWARE="cpu", KIMI_MODEL=str(path))
        assert done.code == 2 and f"KIMI_MODEL='{path}'" in done.err and why in done.err, done.err
        assert "714 GB" not in done.err and done.err.count("\n") == 1


# ---------------------------------------------------------------- ports

@pytest.mark.parametrize("extra", [{"KIMI_PORT": "29590"}, {"KIMI_EXTRA_ARGS": "--master-port 29590"},
                                   {"KIMI_EXTRA_ARGS": "--master-port 8000"}])
@pytest.mark.parametrize("cmd", [["print"], ["plan"]])
def test_a_multi_node_heads_ports_include_the_peer_watch_and_master_port(extra, cmd):
    done = cli(cmd, KIMI_HARDWARE="h100", KIMI_NODES="2", KIMI_HEAD_ADDR="10.0.0.1", KIMI_IFACE="eth0", **extra)
    assert done.code == 2 and "twice" in done.err, done.text[-400:]


# ---------------------------------------------------------------- secrets in any part of a URL

@pytest.mark.parametrize("url", [f"http://prom:9090/?access_token={TOKEN}", f"http://prom:9090/api?a=1&token={TOKEN}",
                                 f"http://prom:9090/?X-Amz-Signature={TOKEN}", f"http://u:{TOKEN}@prom:9090/"])
def test_a_credential_in_a_url_is_never_rendered(url):
    done = cli(["plan", "--format", "k8s"], KIMI_HARDWARE="h200", KIMI_AUTOSCALING="keda", KIMI_PROMETHEUS_URL=url)
    assert done.code == 2 and TOKEN not in done.text


@pytest.mark.parametrize("model", [f"https://hf.co/x?token={TOKEN}", f"s3://bucket/k?sig={TOKEN}&a=1"])
def test_a_credential_in_a_url_is_never_echoed(model):
    done = cli(["print"], KIMI_HARDWARE="h200", KIMI_MODEL=model)
    assert TOKEN not in done.text


@pytest.mark.parametrize("text, kept", [("http://a/?monkey=1&keys=2", True), ("http://a/?tokenizer=x", True),
                                        (f"http://a/?api_key={TOKEN}", False), (f"see ?access_token={TOKEN} there", False)])
def test_the_query_mask_knows_credential_names_only(text, kept):
    assert (mask_value(text) == text) is kept and (mask_output(text, {}) == text) is kept


# ---------------------------------------------------------------- one line, whatever a value holds

@pytest.mark.parametrize("env", [{"KIMI_HARDWARE": "h2\n00"}, {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "tp\r\nx"},
                                 {"KIMI_HARDWARE": "h200", "KIMI_VARIANT": "a\nb"}])
def test_every_refusal_is_one_line(env):
    done = cli(["print"], **env)
    assert done.code == 2 and done.err.count("\n") == 1, done.err


# ---------------------------------------------------------------- the project's own variables

def _project_names() -> set:
    names = set()
    for path in [*ROOT.joinpath("scripts").rglob("*"), *ROOT.joinpath("images").rglob("*")]:
        if path.is_file():
            try:
                names |= set(re.findall(r"\bKIMI_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
            except OSError:
                continue
    return names


def test_every_kimi_name_the_scripts_and_images_use_is_a_setting_or_a_declared_helper():
    unknown = sorted(n for n in _project_names() if n not in BY_ENV and n not in HELPER_VARIABLES)
    assert not unknown, f"rename these (not KIMI_*) or declare them in settings.HELPER_VARIABLES: {unknown}"
    errors, warnings = check_names({name: "1" for name in HELPER_VARIABLES})
    assert errors == [] and warnings == []


def test_the_router_selector_example_is_no_model_literal():
    done = cli(["plan"], KIMI_HARDWARE="h200", KIMI_REPLICAS="2", KIMI_ROUTER_SELECTOR="nokeyvalue")
    assert done.code == 2 and "kimi-k25" not in done.err


# ---------------------------------------------------------------- addresses and thread lists, each class one check

@pytest.mark.parametrize("value, words", [("10.0.0.5:80", "carries a port"), ("a..b", "is not a host name"),
                                          ("u:pw@h", "carries user information")])
def test_the_node_address_is_judged_like_every_address(value, words):
    done = cli(["print"], KIMI_HARDWARE="h100", KIMI_NODES="2", KIMI_HEAD_ADDR="10.0.0.1", KIMI_IFACE="eth0",
               KIMI_NODE_ADDR=value)
    assert done.code == 2 and done.err.startswith("kimi-serve: error: KIMI_NODE_ADDR") and words in done.err
    assert "pw@" not in done.err


@pytest.mark.parametrize("value, ok", [("0-3|4-7", True), ("0,2|1,3", True), ("nobind", True), ("auto", True),
                                       ("0-3", False), ("3-0|4-5", False), ("0-3|2-5", False), ("0-3|", False),
                                       ("0-3|4-7|8-9", False)])
def test_thread_lists_bind_one_list_per_rank(value, ok):
    done = cli(["print"], KIMI_HARDWARE="cpu", KIMI_SKIP_MEMORY_CHECK="1", KIMI_CPU_RANKS="2",
               KIMI_CPU_THREADS_BIND=value)
    assert (done.code == 0) is ok, done.err
    assert ok or ("KIMI_CPU_THREADS_BIND" in done.err and done.err.count("\n") == 1)
