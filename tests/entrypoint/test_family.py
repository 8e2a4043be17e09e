"""The Kimi family: KIMI_RECIPE selects one of the six recipes, and each recipe's own rules
(version floor, CUDA stack, strategy grants and floors, feature allowlists, PD pools, the site's
renderings it corrects) hold. Expected values are written by hand from the recipes' YAML."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from entrypoint.app import build
from entrypoint.core.errors import KimiError

ADDRS = {"KIMI_HEAD_ADDR": "10.0.0.1", "KIMI_IFACE": "eth0"}
def pd(prefill: int = 1, decode: int = 1) -> dict:
    """A pd_cluster with one address per node of each pool (as many as the pools have)."""
    return {"KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": ",".join(f"p{i}" for i in range(prefill)),
            "KIMI_DECODE_ADDRS": ",".join(f"d{i}" for i in range(decode)), "KIMI_IFACE": "eth0"}


def plan(catalog, **env):
    return build(env, catalog=catalog).plan


def refused(catalog, **env) -> KimiError:
    with pytest.raises(KimiError) as info:
        build(env, catalog=catalog)
    return info.value


def argv_of(p, role="single", rank=0):
    return list(p.find(role, rank).argv)


def value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_kimi_recipe_selects_the_model_and_its_names(catalog):
    k3 = plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b300")
    assert k3.recipe == "kimi-k3" and k3.model == "moonshotai/Kimi-K3" and k3.served_model_name == "moonshotai/Kimi-K3"
    assert value(argv_of(k3), "--tool-call-parser") == "kimi_k3"
    default = plan(catalog, KIMI_HARDWARE="h200")
    assert default.recipe == "kimi-k2.5" and default.model == "moonshotai/Kimi-K2.5"
    sel = build({"KIMI_RECIPE": "kimi-k2.7-code", "KIMI_HARDWARE": "h200"}, catalog=catalog).selection
    assert sel.name == "kimi-k2-7-code"
    assert build({"KIMI_RECIPE": "kimi-k3", "KIMI_HARDWARE": "b300", "KIMI_NAME": "mine"},
                 catalog=catalog).selection.name == "mine"


def test_an_unknown_recipe_lists_the_valid_ones_and_the_closest():
    out = subprocess.run([sys.executable, "-m", "entrypoint", "print"], capture_output=True, text=True, timeout=120,
                         env={"PATH": os.environ["PATH"], "KIMI_RECIPE": "kimi-k2.8", "KIMI_HARDWARE": "h200"})
    assert out.returncode == 2 and out.stdout == ""
    assert "KIMI_RECIPE='kimi-k2.8' is not known" in out.stderr and "kimi-k2-instruct" in out.stderr
    assert "Did you mean" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("slug, floor", [("kimi-k2.6", "0.25.0"), ("kimi-k3", "0.27.1")])
def test_a_recipes_vllm_floor_is_enforced(catalog, slug, floor):
    err = refused(catalog, KIMI_RECIPE=slug, KIMI_HARDWARE="b300", KIMI_VLLM_VERSION="0.19.1")
    assert err.code == "unsupported_combination"
    assert f"recipe needs vLLM >= {floor}" in err.message and "0.32.0, 0.33.0" in err.message
    plan(catalog, KIMI_RECIPE=slug, KIMI_HARDWARE="b300", KIMI_VLLM_VERSION="0.32.0")


def test_kimi_k3_needs_a_cuda_13_image(catalog):
    err = refused(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b300", KIMI_IMAGE_CUDA="12.9.1")
    assert "CUDA >= 13.0.0" in err.message and "12.9.1" in err.message and "r580" in err.message
    plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b300", KIMI_IMAGE_CUDA="13.0.2")
    plan(catalog, KIMI_RECIPE="kimi-k2.5", KIMI_HARDWARE="h200", KIMI_IMAGE_CUDA="12.9.1")  # no floor
    plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="mi355x", KIMI_IMAGE_CUDA="12.9.1")  # CUDA: NVIDIA only


def test_strategy_floors_and_grants(catalog):
    err = refused(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="gb200")  # default single_node_tp on 4 GPUs
    assert "at least 8 GPUs" in err.message and "KIMI_NODES=2 with KIMI_STRATEGY=multi_node_tp" in err.message
    err = refused(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="h100", KIMI_NODES="2", **ADDRS)
    assert "at least 32 GPUs" in err.message and "KIMI_NODES=4" in err.message
    err = refused(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="h200", KIMI_NODES="2",
                  KIMI_STRATEGY="multi_node_dep", **ADDRS)
    assert "unsupported on h200" in err.message and "multi_node_tp_dp" in err.message
    granted = argv_of(plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="h200", KIMI_NODES="2",
                           KIMI_STRATEGY="multi_node_tp_dp", **ADDRS), "head")
    assert value(granted, "--tensor-parallel-size") == "8" and value(granted, "--data-parallel-size") == "2"
    err = refused(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b200", KIMI_NODES="2",
                  KIMI_STRATEGY="multi_node_tp_dp", **ADDRS)
    assert "not one the Kimi-K3 recipe offers on b200" in err.message
    err = refused(catalog, KIMI_RECIPE="kimi-k2.5", KIMI_HARDWARE="h200", KIMI_NODES="2",
                  KIMI_STRATEGY="multi_node_tp_dp", **ADDRS)
    assert "not one the Kimi-K2.5 recipe offers" in err.message


def test_feature_allowlists(catalog):
    tp_pp = dict(KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b300", KIMI_NODES="2", KIMI_STRATEGY="multi_node_tp_pp", **ADDRS)
    err = refused(catalog, KIMI_FEATURES="+spec_decoding", **tp_pp)
    assert "spec_decoding" in err.message and "multi_node_tp_pp" in err.message
    on_tp = argv_of(plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b300", KIMI_FEATURES="+spec_decoding"))
    assert "dspark" in value(on_tp, "--speculative-config")
    dcp = argv_of(plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b300", KIMI_FEATURES="+decode_context_parallelism"))
    assert value(dcp, "--decode-context-parallel-size") == "8" and value(dcp, "--attention-backend") == "TOKENSPEED_MLA"


def test_text_only_makes_the_amd_encoder_flag_moot(catalog):
    argv = argv_of(plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="mi355x", KIMI_FEATURES="+text_only"))
    assert "--language-model-only" in argv and "--mm-encoder-tp-mode" not in argv
    assert value(argv, "--max-num-seqs") == "128"  # the rest of the AMD override stays
    assert value(argv_of(plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="mi355x")), "--mm-encoder-tp-mode") == "data"
    # Kimi-K2.5's mxfp4 variant args keep their flag (as the site renders them; no conflicts_with_args there)
    k25 = argv_of(plan(catalog, KIMI_HARDWARE="mi355x", KIMI_VARIANT="mxfp4", KIMI_FEATURES="text_only"))
    assert "--language-model-only" in k25 and "--mm-encoder-tp-mode" in k25


def test_blackwell_pd_keeps_the_recipes_baseline(catalog):
    p = plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b300", **pd(1, 2))
    prefill, decode = p.find("prefill", 0), p.find("decode", 0)
    for proc in (prefill, decode):
        assert value(list(proc.argv), "--load-format") == "fastsafetensors"
        assert value(list(proc.argv), "--max-model-len") == "1048576"
        assert proc.env["UCX_TLS"] == "rc,cuda_copy" and proc.env["VLLM_USE_RUST_FRONTEND"] == "1"
    assert value(list(p.find("router", 0).argv), "--intra-node-data-parallel-size") == "1"  # the recipe's pin
    # pools from memory and the GPU floor: prefill TEP 1 node (8 GPUs = its tp), decode DEP 2 nodes (16 >= 16)
    assert (p.find("decode", 1) is not None, p.find("prefill", 1) is None) == (True, True)
    assert value(list(decode.argv), "--tensor-parallel-size") == "1"
    assert value(list(decode.argv), "--data-parallel-size") == "16"


def test_pd_pools_the_data_rules_out(catalog):
    err = refused(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="gb200", **pd(3, 4))  # prefill TEP over 3 trays: TP 12
    assert "tensor parallel size 8" in err.message and "KIMI_PREFILL_NODES=2 if the model fits" in err.message
    err = refused(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b200", **pd(2, 2))  # TEP over 2 nodes: TP 16
    assert "KIMI_PREFILL_PARALLELISM=dep (TP 8 per data-parallel rank)" in err.message
    err = refused(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="h200", KIMI_PREFILL_NODES="1", **pd(1, 2))
    assert "multi_node_dep unsupported on h200" in err.message and "KIMI_DECODE_PARALLELISM" in err.message
    err = refused(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b300", KIMI_DECODE_NODES="1", **pd(1, 1))
    assert "spans 8 x b300 GPUs" in err.message and "KIMI_DECODE_NODES=2" in err.message
    # the way out the message gives works: DEP prefill with TP 8 per rank
    ok = plan(catalog, KIMI_RECIPE="kimi-k3", KIMI_HARDWARE="b200", KIMI_PREFILL_PARALLELISM="dep", **pd(2, 2))
    prefill = list(ok.find("prefill", 0).argv)
    assert value(prefill, "--tensor-parallel-size") == "8" and value(prefill, "--data-parallel-size") == "2"


def test_recipes_without_a_pd_block_get_tp_pools_sized_by_memory(catalog):
    p = plan(catalog, KIMI_RECIPE="kimi-k2-instruct", KIMI_HARDWARE="h200", **pd(2, 2))  # 1200 GB fp8
    assert [(x.role, x.rank) for x in p.processes] == [("prefill", 0), ("decode", 0), ("router", 0),
                                                       ("prefill", 1), ("decode", 1)]
    assert value(list(p.find("prefill", 0).argv), "--tensor-parallel-size") == "16"
    assert "--headless" in p.find("decode", 1).argv
    one = plan(catalog, KIMI_RECIPE="kimi-k2-thinking", KIMI_HARDWARE="h100", **pd())  # 600 GB on 640 GB
    assert [(x.role, x.rank) for x in one.processes] == [("prefill", 0), ("decode", 0), ("router", 0)]


def test_dcp_must_divide_tp(catalog):
    err = refused(catalog, KIMI_RECIPE="kimi-k2-instruct", KIMI_HARDWARE="gb200", KIMI_NODES="2",
                  KIMI_STRATEGY="multi_node_tp_pp", **ADDRS)
    assert "--decode-context-parallel-size 8 does not divide --tensor-parallel-size 4" in err.message
    ok = argv_of(plan(catalog, KIMI_RECIPE="kimi-k2-instruct", KIMI_HARDWARE="h200", KIMI_NODES="2",
                      KIMI_STRATEGY="multi_node_tp_pp", **ADDRS), "head")
    assert value(ok, "--decode-context-parallel-size") == "8" and value(ok, "--tensor-parallel-size") == "8"


def test_nvlink_only_args_only_on_nvl_trays(catalog):
    for hw, kept in (("gb200", True), ("h200", False), ("mi300x", False)):
        p = plan(catalog, KIMI_RECIPE="kimi-k2.6", KIMI_HARDWARE=hw, KIMI_SKIP_MEMORY_CHECK="1", **pd())
        assert ("--all2all-backend" in p.find("decode", 0).argv) == kept, hw
    user = plan(catalog, KIMI_RECIPE="kimi-k2.6", KIMI_HARDWARE="h200", KIMI_EXTRA_ARGS="--all2all-backend "
                "flashinfer_nvlink_one_sided", **pd())
    assert "--all2all-backend" in user.find("decode", 0).argv  # the user's own args are kept


def test_every_recipe_prints_on_its_hardware():
    for slug, hw in (("kimi-k2-instruct", "b200"), ("kimi-k2-thinking", "h200"), ("kimi-k2.5", "h200"),
                     ("kimi-k2.6", "b300"), ("kimi-k2.7-code", "mi300x"), ("kimi-k3", "b300")):
        out = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", "json"], capture_output=True,
                             text=True, timeout=120, env={"PATH": os.environ["PATH"], "KIMI_RECIPE": slug,
                                                          "KIMI_HARDWARE": hw})
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["recipe"] == slug


def test_verify_expectations_follow_the_recipe(catalog):
    from entrypoint.verify.checks import ChatFacts, skip_reason

    k25 = ChatFacts.of(catalog.recipes["kimi-k2.5"])
    assert k25.reasoning_args == "--reasoning-parser kimi_k2" and k25.thinking_on == {"thinking": True}
    assert k25.images and k25.tool_call_markup == ("<|tool_calls_section_begin|>", "<|tool_call_begin|>")
    k3 = ChatFacts.of(catalog.recipes["kimi-k3"])
    assert k3.reasoning_args == "--reasoning-parser kimi_k3" and "kimi_k3" in k3.tool_args
    assert k3.tool_call_markup == ("<|open|>tools<|sep|>", "<|close|>tools<|sep|>")  # not K2's
    assert skip_reason("chat_instant", frozenset({"reasoning"}), k3)  # no documented thinking switch
    instruct = ChatFacts.of(catalog.recipes["kimi-k2-instruct"])
    assert skip_reason("chat_thinking", frozenset({"tool_calling"}), instruct)  # no reasoning at all
    assert skip_reason("chat_instant", frozenset({"tool_calling"}), instruct) is None  # it always answers directly
    assert ChatFacts.of(catalog.recipes["kimi-k2.6"]).thinking_off == {"thinking": False}


def test_each_image_lists_the_recipes_it_serves(catalog):
    from buildsys import targets

    data = targets.load()
    every = list(catalog.recipes)
    assert data.recipes_served("h200", catalog) == every
    assert data.recipes_served("rocm-gfx950", catalog) == every  # K3's CUDA floor is not a ROCm rule
    old = data.for_release("0.19.1")
    assert old.recipes_served("h200", catalog) == ["kimi-k2-instruct", "kimi-k2-thinking", "kimi-k2.5",
                                                   "kimi-k2.7-code"]  # K2.6 needs 0.25.0, K3 0.27.1 and CUDA 13
    assert old.bases["cuda"].cuda.startswith("12.") and data.bases["cuda"].cuda.startswith("13.")
