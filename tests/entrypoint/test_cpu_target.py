"""KIMI_HARDWARE=cpu (recipes/hardware.yaml `host_backend`, docs/shapes.md): vLLM's CPU backend as a
target like the others. Expected values are written here by hand from vLLM's CPU documentation and
the measured shapes (tests/live), never read from the data under test."""

from __future__ import annotations

import json

import pytest

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError
from entrypoint.core.compose.select import offered_strategies
from entrypoint.core.data.recipe import load_catalog, with_recipe

CATALOG = load_catalog()
RECIPES = sorted(CATALOG.recipes)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A local MoE model of 5 MB of weights (config.json names its experts)."""
    root = tmp_path_factory.mktemp("model")
    (root / "model.safetensors").write_bytes(b"\0" * 5_000_000)
    (root / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "n_routed_experts": 4}))
    return root


def cpu(model, **more) -> dict:
    # a node's memory given (the check counts each rank's 4 GiB KV cache: up to 16 ranks here)
    return {"KIMI_HARDWARE": "cpu", "KIMI_MODEL": str(model), "KIMI_IFACE": "eth0", "KIMI_CPU_MEMORY_GB": "256", **more}


def _layout(sid: str) -> dict:
    if sid == "pd_cluster":
        return {"KIMI_PREFILL_ADDRS": "10.0.0.1", "KIMI_DECODE_ADDRS": "10.0.0.2"}
    return {"KIMI_NODES": "2", "KIMI_HEAD_ADDR": "10.0.0.1"} if sid.startswith("multi_node") else {}


CASES = [(slug, sid, ranks) for slug in RECIPES for sid in offered_strategies(with_recipe(CATALOG, slug), "cpu")
         for ranks in (1, 2, 8)]


def test_every_layout_a_recipe_grants_anywhere_is_offered_on_cpu():
    assert "multi_node_tp_dp" in offered_strategies(with_recipe(CATALOG, "kimi-k3"), "cpu")  # granted on h200 only
    assert len(CASES) == 156  # 7 recipes (K3.1-Pro leaves cpu out), their strategies, 3 rank counts


@pytest.mark.parametrize("slug, sid, ranks", CASES, ids=[f"{s}-{t}-r{r}" for s, t, r in CASES])
def test_every_strategy_of_every_recipe_plans_on_cpu(model, slug, sid, ranks):
    plan = build(cpu(model, KIMI_RECIPE=slug, KIMI_STRATEGY=sid, KIMI_CPU_RANKS=str(ranks), **_layout(sid))).plan
    for proc in plan.engines:
        assert proc.env["VLLM_TARGET_DEVICE"] == "cpu" and proc.local_gpus <= ranks
        assert not [k for k in proc.env if k.startswith(("NCCL_", "VLLM_ROCM_", "AITER_")) or k == "CUDA_VISIBLE_DEVICES"]
        assert "--kv-cache-dtype" not in proc.args and "--all2all-backend" not in proc.args
        kv = proc.vllm.kv_transfer_config
        assert kv is None or json.loads(kv)["kv_buffer_device"] == "cpu"  # NIXL's buffer in host memory


def test_ranks_are_the_nodes_gpus_and_threads_share_its_cores(model):
    (engine,) = build(cpu(model, KIMI_CPU_RANKS="4", KIMI_CPU_THREADS="3", KIMI_CPU_KVCACHE_GIB="2")).plan.engines
    assert engine.vllm.tensor_parallel == 4 and engine.local_gpus == 4
    assert {k: engine.env[k] for k in ("OMP_NUM_THREADS", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND")} == {
        "OMP_NUM_THREADS": "3", "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    assert engine.provenance["VLLM_TARGET_DEVICE"] == "hardware (cpu)"
    (engine,) = build(cpu(model, KIMI_CPU_RANKS="4", KIMI_CPU_CORES="32")).plan.engines
    assert engine.env["OMP_NUM_THREADS"] == "8"  # the node's cores (KIMI_CPU_CORES) over its ranks


def test_a_kimi_checkpoint_is_refused_by_the_memory_check_with_the_figures():
    with pytest.raises(KimiError) as info:
        build({"KIMI_HARDWARE": "cpu", "KIMI_CPU_MEMORY_GB": "32"})
    message = info.value.message
    assert info.value.code == "insufficient_memory"
    assert "714 GB of memory" in message and "1 x cpu ranks hold 32 GB" in message
    assert "KIMI_MODEL=/path/to/a smaller model" in message and "GPU" not in message


def test_a_local_model_is_sized_from_its_own_files(model, tmp_path):
    plan = build(cpu(model, KIMI_CPU_MEMORY_GB="2", KIMI_CPU_KVCACHE_GIB="1")).plan
    assert plan.local_model_gb == pytest.approx(0.005) and plan.vram_minimum_gb == pytest.approx(0.006)
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "model.safetensors", "wb") as weights:
        weights.truncate(3_000_000_000)  # 3 GB, sparse
    with pytest.raises(KimiError, match=r"the model at .*big \(3\.6 GB with vLLM's working memory\) needs at least 4 GB"):
        build(cpu(big, KIMI_CPU_MEMORY_GB="2"))


@pytest.mark.parametrize("more", [{"KIMI_CPU_KVCACHE_GIB": "64"}, {"KIMI_CPU_RANKS": "16"},
                                  {"KIMI_CPU_RANKS": "4", "KIMI_CPU_KVCACHE_GIB": "32"}])
def test_the_memory_check_counts_each_ranks_kv_cache(model, more):
    """Issue 49: VLLM_CPU_KVCACHE_SPACE is host memory each rank allocates beside the weights."""
    with pytest.raises(KimiError) as info:
        build(cpu(model, KIMI_CPU_MEMORY_GB="8", **more))
    assert info.value.code == "insufficient_memory"
    assert "KV cache of" in info.value.message and "KIMI_CPU_KVCACHE_GIB" in info.value.message
    assert "KIMI_CPU_RANKS" in info.value.message
    build(cpu(model, KIMI_CPU_MEMORY_GB="8", KIMI_SKIP_MEMORY_CHECK="1", **more))  # the way out it names


def test_the_recipes_gpu_only_flags_are_dropped_and_the_users_kept(model):
    k3 = build(cpu(model, KIMI_RECIPE="kimi-k3", KIMI_STRATEGY="multi_node_tp_pp", KIMI_NODES="2",
                   KIMI_HEAD_ADDR="10.0.0.1")).plan.first_engine
    assert "--max-num-batched-tokens" in k3.args  # a recipe flag the CPU backend takes is kept
    mine = build(cpu(model, KIMI_EXTRA_ARGS="--kv-cache-dtype fp8")).plan.first_engine
    assert mine.vllm.get("kv_cache_dtype") == "fp8"  # the user's own: vLLM judges it


def test_layouts_the_cpu_backend_cannot_run_are_named_by_preflight(model, tmp_path):
    from entrypoint.node.preflight import check_host_limits

    for sid, ranks, expected in (("single_node_tp", "2", "ok"), ("single_node_tep", "2", "error"),
                                 ("single_node_dep", "2", "error"), ("single_node_dep", "1", "ok")):
        launch = build(cpu(model, KIMI_STRATEGY=sid, KIMI_CPU_RANKS=ranks, KIMI_VLLM_VERSION="0.32.0"))
        check = check_host_limits(launch, launch.plan.first_engine, None, {})
        assert check.status == expected, (sid, ranks, check.message)
    dense = tmp_path / "dense"
    dense.mkdir()
    (dense / "model.safetensors").write_bytes(b"\0" * 100)
    (dense / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    launch = build(cpu(dense, KIMI_STRATEGY="single_node_dep", KIMI_CPU_RANKS="2", KIMI_VLLM_VERSION="0.32.0"))
    assert check_host_limits(launch, launch.plan.first_engine, None, {}).status == "ok"  # a dense model runs DP


def test_kv_offload_is_refused_with_the_reason(model):
    with pytest.raises(KimiError, match=r"already lives in host memory.*KIMI_CPU_KVCACHE_GIB"):
        build(cpu(model, KIMI_KV_OFFLOAD="simple"))


def test_a_node_address_is_what_vllm_advertises(model):
    launch = build(cpu(model, KIMI_STRATEGY="multi_node_tp", KIMI_NODES="2", KIMI_HEAD_ADDR="10.0.0.1",
                       KIMI_NODE_RANK="1", KIMI_NODE_ADDR="10.0.0.2"))
    assert launch.this_process().env["VLLM_HOST_IP"] == "10.0.0.2"
    assert "VLLM_HOST_IP" not in launch.plan.engines[1].env  # the plan's (rendered) process: per node only


def test_the_k8s_rendering_requests_no_device(model):
    from entrypoint.render import k8s

    text = json.dumps(k8s.render(build(cpu("/models/tiny", KIMI_SKIP_MEMORY_CHECK="1"))))
    assert "nvidia.com/gpu" not in text and "amd.com/gpu" not in text


def test_doctor_reports_the_host_it_runs_on(model, tmp_path):
    import os

    from entrypoint.app.doctor import diagnose

    report = diagnose({"PATH": os.environ.get("PATH", ""), "KIMI_HARDWARE": "cpu", "KIMI_MODEL": str(model),
                       "KIMI_CACHE_DIR": str(tmp_path), "KIMI_CPU_RANKS": "2", "KIMI_CPU_THREADS": "1"})
    assert report["launch"]["units"] == "ranks" and report["launch"]["local_gpus"] == 2
    assert report["host"]["ranks"] == 2 and report["host"]["threads_per_rank"] == 1
    assert report["host"]["cores"] >= 1 and report["host"]["ram_gb"] > 0
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["hardware"]["status"] == "ok" and "CPU backend" in checks["hardware"]["message"]
    assert checks["platform"]["status"] == "ok" and checks["host_limits"]["status"] == "ok"


def test_a_one_rank_data_parallel_pool_gets_no_data_parallel_wiring(model):
    """Found by the live PD shape: vLLM reads --data-parallel-start-rank with one local rank as
    external load balancing, which a data-parallel size of 1 refuses."""
    plan = build(cpu(model, KIMI_STRATEGY="pd_cluster", KIMI_PREFILL_ADDRS="10.0.0.1",
                     KIMI_DECODE_ADDRS="10.0.0.2")).plan
    for role in ("prefill", "decode"):
        engine = plan.find(role, 0)
        assert engine.vllm.expert_parallel and engine.vllm.data_parallel == 1
        assert not [a for a in engine.args if a.startswith("--data-parallel")], engine.args
    two = build(cpu(model, KIMI_STRATEGY="pd_cluster", KIMI_CPU_RANKS="2", KIMI_PREFILL_ADDRS="10.0.0.1",
                    KIMI_DECODE_ADDRS="10.0.0.2")).plan.find("prefill", 0)
    assert two.vllm.data_parallel == 2 and "--data-parallel-start-rank" in two.args

