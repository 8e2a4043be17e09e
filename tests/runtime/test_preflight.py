"""Preflight checks against hand-made node facts: each check's error, its way out, and the modes."""

from __future__ import annotations

import dataclasses

import pytest

from entrypoint.app.launch import build
from entrypoint.node.detect import Detection, Gpu
from entrypoint.core.base.errors import PREFLIGHT_FAILED, KimiError
from entrypoint.node.facts import CacheFacts, NodeFacts
from entrypoint.node.preflight import GIB, preflight_launch, run_checks

NVIDIA_DEVICES = frozenset({"/dev/nvidiactl", "/dev/nvidia0"})
AMD_DEVICES = frozenset({"/dev/kfd", "/dev/dri"})
GOOD_CACHE = CacheFacts("/cache", True, "/cache", "xfs", 4000 * 10**9, None)


def facts(hw="h200", count=8, name=None, gib=None, **kw) -> NodeFacts:
    names = {"h200": ("NVIDIA H200", 140.4, "nvidia"), "h100": ("NVIDIA H100 80GB HBM3", 79.6, "nvidia"),
             "mi355x": ("AMD Instinct MI355X", 288, "amd"), "mi300x": ("AMD Instinct MI300X", 192, "amd"),
             "gb200": ("NVIDIA GB200", 185, "nvidia")}
    n, g, brand = names[hw]
    gpus = tuple(Gpu(i, name or n, int((gib or g) * GIB), brand, f"GPU-{i}") for i in range(count))
    base = dict(detection=Detection(hw, gpus, "nvidia-smi", f"name -> {hw}"), all_gpus=gpus, arch="amd64",
                shm_bytes=64 * GIB, devices=AMD_DEVICES if brand == "amd" else NVIDIA_DEVICES, cache=GOOD_CACHE)
    base.update(kw)
    return NodeFacts(**base)


def launch_for(env):
    launch = build(env)
    return launch, launch.this_process()


def statuses(env, node, environ=None):
    launch, proc = launch_for(env)
    proc, results = run_checks(launch, proc, environ or {}, node)
    return {r.name: r for r in results}, proc


H200 = {"KIMI_HARDWARE": "h200"}


def test_a_good_node_passes_every_check():
    results, _ = statuses(H200, facts())
    assert {r.status for r in results.values()} <= {"ok", "skipped"}, results


def test_one_gpu_for_a_tp8_launch_is_an_error_with_a_way_out():
    results, _ = statuses(H200, facts(count=1))
    msg = results["gpu_count"].message
    assert results["gpu_count"].status == "error"
    assert "needs 8 GPU(s)" in msg and "TP 8" in msg and "only 1 usable" in msg and "--gpus all" in msg


def test_visible_devices_in_the_environment_count():
    results, _ = statuses(H200, facts(), environ={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert results["gpu_count"].status == "error" and "4 visible through" in results["gpu_count"].message


def test_vram_uses_the_memory_detected():
    # Eight 80 GB GPUs with an h200 launch: the detected memory is what counts.
    results, _ = statuses(H200, facts(gib=79.6))
    assert results["vram"].status == "error" and "714" in results["vram"].message
    results, _ = statuses({**H200, "KIMI_SKIP_MEMORY_CHECK": "1"}, facts(gib=79.6))
    assert results["vram"].status == "warning"


def test_small_shm_is_an_error_that_names_ipc_host():
    results, _ = statuses(H200, facts(shm_bytes=64 * 2**20))
    assert results["shm"].status == "error"
    assert "--ipc=host" in results["shm"].message and "--shm-size" in results["shm"].message


def test_arm64_image_on_x86_hardware():
    results, _ = statuses(H200, facts(arch="arm64"))
    assert results["platform"].status == "error" and "amd64 image" in results["platform"].message


def test_amd64_image_on_grace():
    results, _ = statuses({"KIMI_HARDWARE": "gb200"}, facts("gb200", count=4, arch="amd64"))
    assert results["platform"].status == "error" and "arm64" in results["platform"].message


def test_rocm_without_kfd_and_cuda_without_nvidia_devices():
    results, _ = statuses({"KIMI_HARDWARE": "mi300x"}, facts("mi300x", devices=frozenset()))
    assert results["platform"].status == "error" and "/dev/kfd" in results["platform"].message
    results, _ = statuses(H200, facts(devices=frozenset()))
    assert results["platform"].status == "error" and "--gpus all" in results["platform"].message


def test_detected_hardware_differs_from_configured():
    results, _ = statuses(H200, facts("mi300x"))
    assert results["hardware"].status == "error" and "KIMI_HARDWARE=mi300x" in results["hardware"].message
    results, _ = statuses({"KIMI_HARDWARE": "h100", "KIMI_NODES": "2", "KIMI_HEAD_ADDR": "10.0.0.1",
                           "KIMI_IFACE": "eth0"}, facts("h200"))
    assert results["hardware"].status == "warning"


def test_old_mec_firmware_on_gfx950_sets_hsa_no_scratch_reclaim():
    env = {"KIMI_HARDWARE": "mi355x"}
    results, proc = statuses(env, facts("mi355x", firmware=(175, 177), firmware_source="rocm-smi --showfw"))
    assert results["firmware"].status == "fixed" and "175" in results["firmware"].message
    assert proc.env["HSA_NO_SCRATCH_RECLAIM"] == "1"
    _launch, original = launch_for(env)
    assert "HSA_NO_SCRATCH_RECLAIM" not in original.env  # the plan itself stays the recipe's


def test_new_mec_firmware_or_other_gpus_change_nothing():
    results, proc = statuses({"KIMI_HARDWARE": "mi355x"}, facts("mi355x", firmware=(177,), firmware_source="x"))
    assert results["firmware"].status == "ok" and "HSA_NO_SCRATCH_RECLAIM" not in proc.env
    results, _ = statuses({"KIMI_HARDWARE": "mi300x"}, facts("mi300x", firmware=(100,)))
    assert results["firmware"].status == "skipped"
    results, _ = statuses({"KIMI_HARDWARE": "mi355x"}, facts("mi355x", firmware_source="rocm-smi --showfw: not installed"))
    assert results["firmware"].status == "warning"


def test_cache_not_writable():
    node = facts(cache=dataclasses.replace(GOOD_CACHE, writable=False))
    results, _ = statuses(H200, node)
    assert results["cache"].status == "error" and "KIMI_CACHE_DIR" in results["cache"].message


def test_cache_inside_the_container_layer_is_a_warning():
    results, _ = statuses(H200, facts(cache=dataclasses.replace(GOOD_CACHE, mount_point="/", fs_type="overlay")))
    assert results["cache"].status == "warning" and "mount a volume" in results["cache"].message


def test_too_little_disk_for_the_checkpoint():
    results, _ = statuses(H200, facts(cache=dataclasses.replace(GOOD_CACHE, free_bytes=100 * 10**9)))
    assert results["cache"].status == "error" and "714 GB" in results["cache"].message


def test_offline_without_weights_is_an_error_and_with_weights_fine():
    results, _ = statuses(H200, facts(), environ={"HF_HUB_OFFLINE": "1"})
    assert results["cache"].status == "error" and "HF_HUB_OFFLINE" in results["cache"].message
    node = facts(cache=dataclasses.replace(GOOD_CACHE, weights_dir="/cache/huggingface/hub/x", free_bytes=0))
    results, _ = statuses(H200, node, environ={"HF_HUB_OFFLINE": "1"})
    assert results["cache"].status == "ok"


def test_router_needs_no_gpu():
    env = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_ROLE": "router",
           "KIMI_PREFILL_ADDRS": "10.0.0.1", "KIMI_DECODE_ADDRS": "10.0.0.2"}
    results, _ = statuses(env, facts(count=0, devices=frozenset(), shm_bytes=1))
    assert results["gpu_count"].status == "skipped" and results["platform"].status == "ok"
    assert results["cache"].status == "skipped"


# ---------------------------------------------------------------- modes


def test_on_stops_the_start_with_every_problem():
    launch, proc = launch_for(H200)
    with pytest.raises(KimiError) as err:
        preflight_launch(launch, proc, {}, facts(count=1, shm_bytes=1))
    assert err.value.code == PREFLIGHT_FAILED
    assert "gpu_count" in err.value.message and "shm" in err.value.message and "KIMI_PREFLIGHT=warn" in err.value.message


def test_warn_logs_errors_as_warnings_and_goes_on():
    launch, proc = launch_for({**H200, "KIMI_PREFLIGHT": "warn"})
    out, entries = preflight_launch(launch, proc, {}, facts(count=1))
    gpu = next(e for e in entries if e.event == "preflight.gpu_count")
    assert out == proc and gpu.level == "warning" and gpu.fields["status"] == "error"


def test_warn_still_applies_fixes():
    launch, proc = launch_for({"KIMI_HARDWARE": "mi355x", "KIMI_PREFLIGHT": "warn"})
    out, _ = preflight_launch(launch, proc, {}, facts("mi355x", firmware=(170,)))
    assert out.env["HSA_NO_SCRATCH_RECLAIM"] == "1"


def test_off_skips_everything():
    launch, proc = launch_for({**H200, "KIMI_PREFLIGHT": "off"})
    out, entries = preflight_launch(launch, proc, {}, facts(count=0))
    assert out == proc and [e.event for e in entries] == ["preflight"]


def test_a_kv_connector_package_missing_from_the_image_is_an_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    env = {"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "lmcache"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lmcache" else real(name, *a))
    results, _ = statuses(env, facts())
    assert results["kv_components"].status == "error"
    assert "lmcache" in results["kv_components"].message and "docs/kv-cache.md" in results["kv_components"].message
    results, _ = statuses({**env, "KIMI_ROLE": "lmcache"}, facts())
    assert results["kv_components"].status == "skipped"  # the server is its own program
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    results, _ = statuses(env, facts())
    assert results["kv_components"].status == "ok"
