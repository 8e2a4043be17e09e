"""A new Kimi model is one YAML file: a temporary copy of recipes/ gains a made-up seventh recipe
(`kimi-k9`: a model, parser, draft model, strategy grant and GPU floor no code has ever heard of)
and a made-up GPU (`x900`), and every command works on them with no code change, through
KIMI_RECIPES_DIR, in real `kimi-serve` subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.architecture.test_new_hardware import NEW_ID, data_with_new_hardware

ROOT = Path(__file__).resolve().parents[2]
SLUG = "kimi-k9"
DRAFT = "example-org/kimi-k9-draft"
NEW_RECIPE = {
    "id": SLUG, "title": "Kimi-K9", "provider": "Example", "deployment_name": "kimi-k9",
    "description": "A made-up seventh Kimi recipe, known only to this test's data",
    "model": {"model_id": "example-org/Kimi-K9", "min_vllm_version": "0.32.0", "context_length": 65536,
              "base_args": ["--trust-remote-code", "--max-model-len", "65536"],
              "files": {"weights": ["*.safetensors"], "top_level": ["*.json", "*.py"]}},
    "chat": {"thinking_on": {"enable_thinking": True}, "thinking_off": {"enable_thinking": False}},
    "hardware": ["h200", "b200", NEW_ID, "mi355x"],
    "features": {
        "tool_calling": {"description": "K9 tool calls", "args": ["--enable-auto-tool-choice", "--tool-call-parser",
                                                                 "kimi_k2"]},
        "reasoning": {"description": "K9 reasoning", "args": ["--reasoning-parser", "kimi_k2"]},
        "spec_decoding": {"description": "K9 draft", "strategies": ["single_node_tp", "multi_node_tp"],
                          "args": ["--speculative-config",
                                   json.dumps({"model": DRAFT, "method": "eagle3", "num_speculative_tokens": 2})]},
    },
    "opt_in_features": [],
    "variants": {"default": {"precision": "fp8", "vram_minimum_gb": 900}},
    "compatible_strategies": ["single_node_tp", "multi_node_tp", "multi_node_tp_pp", "pd_cluster"],
    "strategy_hardware": {"multi_node_tp_dp": {NEW_ID: "supported"}},
    "strategy_min_gpus": {"multi_node_tp_pp": 16},
    "hardware_overrides": {"blackwell": {"extra_args": ["--kv-cache-dtype", "fp8"]}},
    "strategy_overrides": {"pd_cluster": {"prefill": {"parallelism": "tp"}, "decode": {"parallelism": "tp"}}},
}


@pytest.fixture(scope="module")
def recipes(tmp_path_factory) -> Path:
    copy = data_with_new_hardware(tmp_path_factory)
    (copy / "models" / f"{SLUG}.yaml").write_text(yaml.safe_dump(NEW_RECIPE, sort_keys=False))
    return copy


def kimi(recipes: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {"PATH": os.environ["PATH"], "HOME": str(recipes.parent), "KIMI_RECIPES_DIR": str(recipes),
               "PYTHONPATH": str(ROOT), "KIMI_RECIPE": SLUG, **env}
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], env=environ, capture_output=True, text=True,
                          timeout=120, cwd=recipes.parent)


def test_the_new_recipe_is_unknown_to_the_real_data():
    assert not (ROOT / "recipes" / "models" / f"{SLUG}.yaml").exists()
    out = subprocess.run([sys.executable, "-m", "entrypoint", "print"], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "KIMI_RECIPE": SLUG, "KIMI_HARDWARE": "h200"}, timeout=120)
    assert out.returncode == 2 and "KIMI_RECIPE='kimi-k9' is not known" in out.stderr and "kimi-k3" in out.stderr


@pytest.mark.slow
def test_print_plan_and_batch(recipes, tmp_path):
    out = kimi(recipes, "print", "--format", "json", KIMI_HARDWARE=NEW_ID)
    assert out.returncode == 0, out.stderr
    argv = json.loads(out.stdout)["argv"]
    assert argv[:6] == ["vllm", "serve", "example-org/Kimi-K9", "--trust-remote-code", "--max-model-len", "65536"]
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8"  # the blackwell override on the new GPU
    assert DRAFT in argv[argv.index("--speculative-config") + 1]
    plan = json.loads(kimi(recipes, "plan", "--format", "json", KIMI_HARDWARE="h200", KIMI_NODES="2",
                           KIMI_STRATEGY="multi_node_tp_pp", KIMI_HEAD_ADDR="10.0.0.1", KIMI_IFACE="eth0").stdout)
    assert plan["recipe"] == SLUG and [p["role"] for p in plan["processes"]] == ["head", "worker"]
    assert "--speculative-config" not in plan["processes"][0]["argv"]  # not on tp_pp: the allowlist
    granted = kimi(recipes, "plan", "--format", "json", KIMI_HARDWARE=NEW_ID, KIMI_NODES="2",
                   KIMI_STRATEGY="multi_node_tp_dp", KIMI_HEAD_ADDR="10.0.0.1", KIMI_IFACE="eth0")
    assert granted.returncode == 0, granted.stderr
    assert "--data-parallel-size-local" in json.loads(granted.stdout)["processes"][0]["argv"]
    refused = kimi(recipes, "print", KIMI_HARDWARE="h200", KIMI_NODES="2", KIMI_STRATEGY="multi_node_tp_dp",
                   KIMI_HEAD_ADDR="10.0.0.1", KIMI_IFACE="eth0")
    assert refused.returncode == 2 and "multi_node_tp_dp" in refused.stderr
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps({"KIMI_RECIPE": SLUG, **e}) + "\n" for e in (  # a line is its own environment
        {"KIMI_HARDWARE": NEW_ID}, {"KIMI_HARDWARE": "mi355x", "KIMI_STRATEGY": "pd_cluster",
                                    "KIMI_PREFILL_ADDRS": "p0", "KIMI_DECODE_ADDRS": "d0"},
        {"KIMI_HARDWARE": "h100"})))
    lines = [json.loads(line) for line in kimi(recipes, "plan", "--format", "json", "--batch", str(batch)).stdout
             .splitlines()]
    assert lines[0]["recipe"] == SLUG and lines[1]["processes"][-1]["role"] == "router"
    assert lines[2]["error"]["code"] == "unsupported_combination"  # h100 is not in the recipe's hardware
    for fmt in ("shell", "compose", "k8s"):
        where = tmp_path / fmt
        args = ("plan", "--format", fmt) + (() if fmt == "shell" else ("--output", str(where)))
        out = kimi(recipes, *args, KIMI_HARDWARE=NEW_ID)
        assert out.returncode == 0, out.stderr
        text = out.stdout if fmt == "shell" else "".join(p.read_text() for p in where.iterdir())
        assert "Kimi-K9 on x900" in text
        if fmt == "shell":
            assert "vllm serve example-org/Kimi-K9" in text
        elif fmt == "k8s":  # the containers resolve the same recipe: their settings hold it, and it names them
            (given,) = [json.loads(d["data"]["settings.json"]) for d in yaml.safe_load_all(text)
                        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kimi-k9-settings"]
            assert given["recipe"] == "kimi-k9" and "name: kimi-k9" in text
        else:
            assert "KIMI_RECIPE: kimi-k9" in text and "  kimi-k9:" in text
        if fmt != "shell":
            assert "ghcr.io/kimi-serve/kimi:0.33.0-b200" in text


def test_explain_and_list(recipes):
    out = kimi(recipes, "explain", KIMI_HARDWARE="b200")
    assert out.returncode == 0 and out.stdout.startswith("Kimi-K9 on b200"), out.stderr
    listed = json.loads(kimi(recipes, "list", "--format", "json").stdout)
    assert listed["recipe"] == SLUG and listed["recipes"][SLUG]["model"] == "example-org/Kimi-K9"
    assert "multi_node_tp_dp" in listed["hardware"][NEW_ID]["strategies"]
    assert "multi_node_tp_dp" not in listed["hardware"]["h200"]["strategies"]
    assert "multi_node_tp_pp (>= 2 nodes)" in listed["hardware"]["h200"]["strategies"]


def test_version_floor(recipes):
    out = kimi(recipes, "print", KIMI_HARDWARE="h200", KIMI_VLLM_VERSION="0.19.1")
    assert out.returncode == 2 and "Kimi-K9 recipe needs vLLM >= 0.32.0" in out.stderr, out.stderr


def test_doctor_and_download_name_the_new_models(recipes, tmp_path):
    from entrypoint.app.launch import build
    from entrypoint.core.compose.weights import sources
    from entrypoint.core.data.recipe import load_catalog_from

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "smi.csv").write_text("".join(f"{i}, NVIDIA X900, 245760, GPU-x900-{i}\n" for i in range(8)))
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec /bin/cat {tmp_path / 'smi.csv'}\n")
    smi.chmod(0o755)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "KIMI_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    out = kimi(recipes, "doctor", "--format", "json", KIMI_HARDWARE="auto", **env)  # detection asked for, as print
    report = json.loads(out.stdout)
    assert report["detection"]["hardware"] == NEW_ID, out.stderr
    assert report["launch"]["recipe"] == SLUG and report["launch"]["model"] == "example-org/Kimi-K9"
    cache = {c["check"]: c for c in report["checks"]}["cache"]
    assert "example-org/Kimi-K9" in cache["message"], cache
    out = kimi(recipes, "download", KIMI_HARDWARE=NEW_ID, HF_HUB_OFFLINE="1", KIMI_CACHE_DIR=str(tmp_path / "c2"))
    assert out.returncode == 2 and "example-org/Kimi-K9" in out.stderr, out.stderr
    plan = build({"KIMI_RECIPE": SLUG, "KIMI_HARDWARE": NEW_ID}, catalog=load_catalog_from(recipes)).plan
    assert [(s.repo_id, s.purpose) for s in sources(plan)] == [("example-org/Kimi-K9", "model"),
                                                              (DRAFT, "draft model")]
