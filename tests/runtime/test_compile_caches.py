"""Warm restarts (issue 30, docs/day2.md): every cache vLLM and its compilers write goes to the
cache volume under a key of the vLLM release, the image's stack, the hardware, the model and the
engine's parallel layout; set at the exec edge (never in the plan's env), reported by `doctor`."""

from __future__ import annotations

import io

import pytest

from entrypoint.app.launch import build
from entrypoint.core.vllm.vllm_cli import available_versions, load_spec
from entrypoint.node.cache import cache_env
from entrypoint.node.logs import log_decisions
from entrypoint.node.preflight import check_compile_cache

BASE = {"KIMI_HARDWARE": "h200"}
# What each library reads (their own docs and sources, docs/day2.md), written out here.
NVIDIA = {"VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
          "FLASHINFER_WORKSPACE_BASE", "DG_JIT_CACHE_DIR", "CUDA_CACHE_PATH"}
AMD = {"VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
       "MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR"}


def _env(tmp_path, environ=None, **settings):
    launch = build({**BASE, **settings})
    proc = launch.this_process()
    return cache_env(str(tmp_path), {"HOME": str(tmp_path), **(environ or {})}, launch.compile_caches(proc))


def _key(tmp_path, **settings) -> str:
    path = _env(tmp_path, **settings)["TRITON_CACHE_DIR"]
    assert path.startswith(f"{tmp_path}/compile/") and path.endswith("/triton")
    return path


def test_every_compiler_cache_is_on_the_volume_for_the_brand(tmp_path):
    env = _env(tmp_path)
    assert NVIDIA <= set(env) and not set(env) & (AMD - NVIDIA)
    assert all(env[name].startswith(f"{tmp_path}/compile/") for name in NVIDIA)
    amd = _env(tmp_path, KIMI_HARDWARE="mi355x")
    assert AMD <= set(amd) and not set(amd) & (NVIDIA - AMD)
    assert env["HF_HOME"] == f"{tmp_path}/huggingface"  # the weights stay shared by every launch


@pytest.mark.parametrize("other", [{"KIMI_VLLM_VERSION": "0.32.0"}, {"KIMI_HARDWARE": "b200"},
                                   {"KIMI_MODEL": "/models/my-kimi"}, {"KIMI_MODEL_REVISION": "v2"},
                                   {"KIMI_STRATEGY": "single_node_tep"}, {"KIMI_STRATEGY": "single_node_dep"},
                                   {"KIMI_IMAGE_CUDA": "12.9"}])
def test_another_release_stack_target_model_or_layout_never_shares_a_key(tmp_path, other):
    mine = _key(tmp_path)
    assert _key(tmp_path) == mine  # a restart of the same launch: the same, warm folder
    assert _key(tmp_path, **other) != mine


def test_a_smaller_tp_of_the_recipes_data_has_its_own_key(tmp_path):
    """The layout is the typed settings' and the recipe data's (a --tensor-parallel-size of the
    user's is refused, issue 37): the InferenceX lane's TP 4 is not the variant's TP 8."""
    lane = {"KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4"}
    tp8 = _key(tmp_path, **lane)
    tp4 = _key(tmp_path, **lane, KIMI_PROFILE="inferencex", KIMI_EXTRA_ARGS="--max-model-len 9472")
    assert "/tp8-pp1-dp1/" in tp8 and "/tp4-pp1-dp1/" in tp4


def test_the_users_own_cache_paths_are_kept(tmp_path):
    env = _env(tmp_path, {"TRITON_CACHE_DIR": "/fast/triton"})
    assert "TRITON_CACHE_DIR" not in env and "TORCHINDUCTOR_CACHE_DIR" in env


def test_only_engines_compile_and_the_plan_env_stays_the_recipes():
    launch = build({**BASE, "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": "p", "KIMI_DECODE_ADDRS": "d"})
    router = launch.plan.find("router", 0)
    assert launch.compile_caches(router) is None
    for proc in launch.plan.processes:
        assert not NVIDIA & set(proc.env)


@pytest.mark.parametrize("version", available_versions())  # every recorded release
def test_the_vllm_variables_are_ones_that_release_reads(version):
    known = load_spec(version).env
    assert {n for n in NVIDIA | AMD if n.startswith("VLLM_")} <= set(known)


def test_the_dry_run_log_shows_them(tmp_path):
    launch = build({**BASE, "KIMI_CACHE_DIR": str(tmp_path)})
    out = io.StringIO()
    log_decisions(launch, {"HOME": str(tmp_path)}, stream=out, compiled=launch.compile_caches(launch.this_process()))
    assert f"TORCHINDUCTOR_CACHE_DIR={tmp_path}/compile/" in out.getvalue()


def test_doctor_says_cold_then_warm(tmp_path):
    launch = build({**BASE, "KIMI_CACHE_DIR": str(tmp_path)})
    proc = launch.this_process()
    cold = check_compile_cache(launch, proc, None, {})
    assert cold.status == "ok" and cold.message.startswith("cold")
    graph = tmp_path / _env(tmp_path)["VLLM_CACHE_ROOT"].removeprefix(f"{tmp_path}/") / "torch_compile_cache" / "x"
    graph.mkdir(parents=True)
    (graph / "model.bin").write_bytes(b"compiled")
    warm = check_compile_cache(launch, proc, None, {})
    assert warm.message.startswith("warm: VLLM_CACHE_ROOT 1 file(s)"), warm.message
