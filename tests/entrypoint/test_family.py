"""The Kimi family: KIMI_RECIPE selects one of the eight recipes (seven of the recipe collection, Kimi-K3.1-Pro provisional), and each recipe's own rules
(version floor, CUDA stack, strategy grants and floors, feature allowlists, PD pools, the site's
renderings it corrects) hold. Expected values are written by hand from the recipes' YAML."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError

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
    assert f"recipe needs vLLM >= {floor}" in err.message and "0.32.0, 0.33.0, 0.34.0" in err.message
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


LINEAR = "kimi-linear-48b-a3b-instruct"  # a version window, no features, no PD, no single-node TEP/DEP, 115 GB bf16


def test_a_refused_release_is_refused_like_one_below_the_floor(catalog):
    err = refused(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE="h200", KIMI_VLLM_VERSION="0.12.0")
    assert err.code == "unsupported_combination"
    assert "refuses vLLM 0.12.0" in err.message and "known Kimi-Linear regression" in err.message
    assert "indexer_rotary_emb" in err.message  # the error users would see at load
    assert "runs on vLLM >= 0.11.2, not 0.12.0" in err.message and "0.19.1, 0.32.0, 0.33.0, 0.34.0" in err.message
    for spelled in ("v0.12.0", "0.12.0+cu129"):  # any spelling of the release
        assert "refuses vLLM 0.12.0" in refused(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE="h200",
                                                KIMI_VLLM_VERSION=spelled).message
    below = refused(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE="h200", KIMI_VLLM_VERSION="0.11.1")
    assert "needs vLLM >= 0.11.2" in below.message
    for fine in ("0.11.2", "0.12.1", "0.19.1", "0.33.0", "0.34.0"):  # the floor itself, the next release, the shipped ones
        assert plan(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE="h200", KIMI_VLLM_VERSION=fine).recipe == LINEAR
    plan(catalog, KIMI_RECIPE="kimi-k2-thinking", KIMI_HARDWARE="h200", KIMI_VLLM_VERSION="0.12.0")  # its floor


@pytest.mark.slow
def test_a_release_gets_the_verdict_of_its_class(catalog):
    """select.version_classes: the releases from which plan's verdict may change (the chart keys its
    tables of plan's verdicts by them). Every floor the data records is one, so is the release after
    a refused one; and a release inside a class is refused, or not, as the class's first release is,
    for every recipe on every hardware with its default strategy and with each of its profiles."""
    from entrypoint.core.compose.select import version_classes
    from entrypoint.core.data.versions import version_key

    classes = version_classes(catalog)
    assert classes[0] == "0.0.0" and classes == sorted(classes, key=version_key)
    for floor in ("0.11.2", "0.12.0", "0.12.1", "0.19.1", "0.24.0", "0.27.1", "0.32.0", "0.33.0", "0.34.0"):
        assert floor in classes  # Kimi-Linear's floor, its refused release and the next, grammars, flydsl, K3, a removed env

    def verdict(env):
        try:
            build(env, catalog=catalog)
        except KimiError as exc:
            return exc.code
        return None

    judged = 0
    for slug, recipe in catalog.recipes.items():
        for hw in recipe.hardware:
            for extra in [{}, *({"KIMI_PROFILE": p} for p in recipe.profiles if hw in recipe.profiles[p].hardware)]:
                env = {"KIMI_RECIPE": slug, "KIMI_HARDWARE": hw, "KIMI_SKIP_MEMORY_CHECK": "1", **extra}
                for first, nxt in zip(classes, classes[1:] + ["99.0.0"]):
                    major, minor, patch = version_key(first)
                    a, b, c = version_key(nxt)
                    last = f"{a}.{b}.{c - 1}" if c else (f"{a}.{b - 1}.99" if b else f"{a - 1}.99.99")  # the class's end
                    inside = {v for v in (f"{major}.{minor}.{patch + 1}", f"{major}.{minor + 1}.0", last)
                              if version_key(first) < version_key(v) < version_key(nxt)}
                    expected = verdict({**env, "KIMI_VLLM_VERSION": first})
                    for release in inside:
                        assert verdict({**env, "KIMI_VLLM_VERSION": release}) == expected, (env, first, release)
                        judged += 1
    assert judged > 100


def test_the_issues_command_is_refused_without_any_other_setting():
    """`KIMI_RECIPE=kimi-linear-48b-a3b-instruct KIMI_VLLM_VERSION=0.12.0 kimi-serve print`: the
    window is checked first, so it is refused whatever else is (or is not) set, exit 2."""
    out = subprocess.run([sys.executable, "-m", "entrypoint", "print", "--format", "json"], capture_output=True,
                         text=True, timeout=120, env={"PATH": os.environ["PATH"], "KIMI_RECIPE": LINEAR,
                                                      "KIMI_VLLM_VERSION": "0.12.0"})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "refuses vLLM 0.12.0" in out.stderr and "known Kimi-Linear regression" in out.stderr
    assert "use an image built on vLLM 0.19.1, 0.32.0, 0.33.0, 0.34.0" in out.stderr


def test_the_installed_vllm_is_held_to_the_same_window(catalog):
    from entrypoint.core.compose.launch import NodeFacts, compose_launch
    from entrypoint.core.compose.settings import read_settings

    settings = read_settings({"KIMI_RECIPE": LINEAR, "KIMI_HARDWARE": "h200"})
    with pytest.raises(KimiError) as info:
        compose_launch(settings, NodeFacts(vllm="0.12.0"), catalog)
    assert info.value.code == "unsupported_combination" and "the installed vLLM=0.12.0" in info.value.message
    assert compose_launch(settings, NodeFacts(vllm="0.33.0"), catalog).selection.vllm_version == "0.33.0"


def test_an_image_on_a_refused_release_does_not_list_the_recipe(catalog):
    """The image labels' list of recipes: an image built on a release the recipe refuses does not
    serve it; the same rule as the start's check (an image bakes its release in KIMI_VLLM_VERSION)."""
    from buildsys import targets
    from buildsys.engine import build_args

    data = targets.load()
    assert LINEAR in data.recipes_served("h200", catalog) and LINEAR in data.recipes_served("rocm-gfx942", catalog)
    assert LINEAR in data.for_release("0.19.1").recipes_served("h200", catalog)
    on_bad = data.model_copy(update={"vllm_version": "0.12.0"})
    served = on_bad.recipes_served("h200", catalog)
    assert LINEAR not in served and "kimi-k2-thinking" in served and "kimi-k2.5" not in served  # K2.5: >= 0.19.1
    baked = build_args(on_bad, "h200", "base")
    err = refused(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE=baked["KIMI_IMAGE_HARDWARE"],
                  KIMI_VLLM_VERSION=baked["KIMI_VLLM_VERSION"], KIMI_IMAGE_SERVES=baked["KIMI_IMAGE_SERVES"])
    assert "refuses vLLM 0.12.0" in err.message


def test_a_recipe_without_features(catalog):
    for spec in (None, "", " , "):  # absent, empty, only separators: no feature
        env = {} if spec is None else {"KIMI_FEATURES": spec}
        p = plan(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE="b200", **env)
        assert p.features == () and argv_of(p) == ["vllm", "serve", "moonshotai/Kimi-Linear-48B-A3B-Instruct",
                                                   "--trust-remote-code", "--tensor-parallel-size", "1",
                                                   "--shutdown-timeout", "300"]  # the drain (issue 30)
    for spec in ("tool_calling", "+reasoning", "-spec_decoding"):
        err = refused(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE="b200", KIMI_FEATURES=spec)
        assert err.code == "unknown_value" and "there are no valid values" in err.message
        assert "Valid values: ." not in err.message and "has no features" in err.message
        assert "leave KIMI_FEATURES unset or set it to an empty string" in err.message
    err = refused(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE="b200", KIMI_PROFILE="flydsl")
    assert "has no profiles: leave KIMI_PROFILE unset" in err.message


@pytest.mark.parametrize("sid, across", [("single_node_tep", "multi_node_tep"), ("single_node_dep", "multi_node_dep"),
                                         ("pd_cluster", None), ("multi_node_tp_dp", None)])
def test_strategies_a_recipe_does_not_offer(catalog, sid, across):
    env = pd() if sid == "pd_cluster" else {"KIMI_NODES": "2", **ADDRS} if sid.startswith("multi_node") else {}
    err = refused(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE="mi300x", **{**env, "KIMI_STRATEGY": sid})
    assert err.code == "unsupported_combination"
    assert f"KIMI_STRATEGY={sid} is not one the Kimi-Linear-48B-A3B-Instruct recipe offers on mi300x" in err.message
    assert "single_node_tp, multi_node_tp, multi_node_tp_pp, multi_node_tep, multi_node_dep" in err.message
    assert (f"KIMI_STRATEGY={across} with KIMI_NODES=2 or more" in err.message) == (across is not None)


@pytest.mark.parametrize("hw, tp", [("h100", "8"), ("h200", "1"), ("gb200", "1"), ("mi355x", "1")])
def test_one_gpu_holds_the_model_except_on_h100(catalog, hw, tp):
    """115 GB of bf16: one GPU of every hardware but H100 (80 GB) holds it, so the site's 1-or-all
    auto-fit gives TP 1; H100 takes the whole node (TP 8)."""
    p = plan(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE=hw)
    assert value(argv_of(p), "--tensor-parallel-size") == tp
    assert p.pools[0].gpus == int(tp)


def test_a_recipe_without_a_draft_model_downloads_the_model_alone(catalog):
    from entrypoint.core.compose.weights import sources

    for hw, nodes in (("h200", {}), ("mi355x", {"KIMI_NODES": "2", "KIMI_STRATEGY": "multi_node_dep", **ADDRS})):
        p = plan(catalog, KIMI_RECIPE=LINEAR, KIMI_HARDWARE=hw, **nodes)
        assert [(s.repo_id, s.purpose) for s in sources(p)] == [("moonshotai/Kimi-Linear-48B-A3B-Instruct", "model")]


def test_every_recipe_prints_on_its_hardware():
    for slug, hw in (("kimi-k2-instruct", "b200"), ("kimi-k2-thinking", "h200"), ("kimi-k2.5", "h200"),
                     ("kimi-k2.6", "b300"), ("kimi-k2.7-code", "mi300x"), ("kimi-k3", "b300"), (LINEAR, "mi325x")):
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
    # K3's CUDA floor is not a ROCm rule; K3.1-Pro leaves AMD (and the cpu target) out
    assert data.recipes_served("rocm-gfx950", catalog) == [s for s in every if s != "kimi-k3.1-pro"]
    assert data.recipes_served("cpu", catalog) == [s for s in every if s != "kimi-k3.1-pro"]
    assert data.for_release("0.33.0").recipes_served("h200", catalog) == [s for s in every if s != "kimi-k3.1-pro"]
    old = data.for_release("0.19.1")
    assert old.recipes_served("h200", catalog) == ["kimi-k2-instruct", "kimi-k2-thinking", "kimi-k2.5",
                                                   "kimi-k2.7-code", "kimi-linear-48b-a3b-instruct"]
    # K2.6 needs 0.25.0, K3 0.27.1 and CUDA 13
    assert old.bases["cuda"].cuda.startswith("12.") and data.bases["cuda"].cuda.startswith("13.")
