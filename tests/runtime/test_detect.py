"""Detection against recorded / realistic tool outputs, fake sysfs trees, missing tools, garbage."""

from __future__ import annotations

import pytest

from entrypoint.node.detect import (Gpu, detect, mec_firmware, parse_nvidia_smi, probe_sysfs, visible_gpus)
from entrypoint.core.data.recipe import load_catalog

from .conftest import AMD_IDS, FIXTURES, NVIDIA_IDS, TOOLS, make_kfd_tree

CATALOG = load_catalog()


def run_detect(env, root="/nonexistent-root", **kw):
    return detect(env, root=str(root), catalog=CATALOG, use_nvml=False, **kw)


@pytest.mark.parametrize("hw", NVIDIA_IDS)
def test_nvidia_smi_every_nvidia_id(fake_tools, hw):
    fake_tools.add("nvidia-smi", TOOLS / "nvidia-smi" / f"{hw}.csv")
    det = run_detect(fake_tools.env)
    assert det.hardware == hw and det.source == "nvidia-smi"
    assert det.count == CATALOG.hardware[hw].gpu_count


@pytest.mark.parametrize("hw", AMD_IDS)
@pytest.mark.parametrize("tool", ["amd-smi", "rocm-smi"])
def test_amd_tools_every_amd_id(fake_tools, hw, tool):
    fake_tools.add(tool, TOOLS / tool / f"{hw}.json")
    det = run_detect(fake_tools.env)
    assert (det.hardware, det.source, det.count) == (hw, tool, 8)
    assert det.gpus[0].gfx == CATALOG.hardware[hw].gfx


@pytest.mark.parametrize("hw", AMD_IDS)
def test_sysfs_with_product_name_every_amd_id(tmp_path, hw):
    name = {"mi300x": "AMD Instinct MI300X", "mi325x": "AMD Instinct MI325X", "mi350x": "AMD Instinct MI350X",
            "mi355x": "AMD Instinct MI355X"}[hw]
    profile = CATALOG.hardware[hw]
    make_kfd_tree(tmp_path, profile.gfx, int(profile.detect.memory_gb * 2**30), product_name=name)
    det = run_detect({"PATH": str(tmp_path / "empty")}, root=tmp_path)
    assert (det.hardware, det.source, det.count) == (hw, "sysfs", 8)


@pytest.mark.parametrize("gfx, gib, expected", [("gfx942", 191.98, "mi300x"), ("gfx942", 256, "mi325x")])
def test_sysfs_without_name_tells_mi300x_from_mi325x_by_memory(tmp_path, gfx, gib, expected):
    make_kfd_tree(tmp_path, gfx, int(gib * 2**30))
    det = run_detect({"PATH": ""}, root=tmp_path)
    assert det.hardware == expected and "gfx942" in det.reason


def test_sysfs_without_name_cannot_tell_mi350x_from_mi355x(tmp_path):
    make_kfd_tree(tmp_path, "gfx950", 288 * 2**30)
    det = run_detect({"PATH": ""}, root=tmp_path)
    assert det.hardware is None and det.count == 8
    assert "mi350x or mi355x" in det.reason and "KIMI_HARDWARE" in det.reason


def test_missing_tools_each_say_what_they_saw(tmp_path):
    det = run_detect({"PATH": str(tmp_path)}, root=tmp_path)
    assert det.hardware is None and det.count == 0
    saw = {p.source: p.saw for p in det.probes}
    assert saw["nvidia-smi"] == saw["amd-smi"] == saw["rocm-smi"] == "not installed"
    assert "no amdgpu driver" in saw["sysfs"]
    assert "no GPU found" in det.summary()


@pytest.mark.parametrize("tool", ["nvidia-smi", "amd-smi", "rocm-smi"])
def test_garbage_output_is_tolerated(fake_tools, tool):
    fake_tools.add(tool, TOOLS / "garbage.txt")
    det = run_detect(fake_tools.env)
    probe = next(p for p in det.probes if p.source == tool)
    assert det.hardware is None and probe.gpus == ()
    assert "unreadable" in probe.saw


def test_failing_tool_reports_its_exit_and_message(fake_tools):
    fake_tools.add("nvidia-smi", TOOLS / "nvidia-smi" / "driver-mismatch.txt", rc=18)
    det = run_detect(fake_tools.env)
    saw = det.probes[0].saw
    assert saw.startswith("exit 18") and "580.159" in saw


def test_nvidia_smi_partial_garbage_keeps_good_lines():
    gpus, bad = parse_nvidia_smi("0, NVIDIA H200, 143771, GPU-a\n[N/A], ERR!, [N/A]\n1, NVIDIA H200, 143771, GPU-b\n")
    assert [g.index for g in gpus] == [0, 1] and len(bad) == 1


def test_falls_through_to_the_next_probe(fake_tools):
    fake_tools.add("nvidia-smi", "", rc=9).add("rocm-smi", TOOLS / "rocm-smi" / "mi325x.json")
    det = run_detect(fake_tools.env)
    assert det.hardware == "mi325x" and [p.source for p in det.probes] == ["nvidia-smi", "amd-smi", "rocm-smi"]


def test_older_amd_smi_string_sizes(fake_tools):
    fake_tools.add("amd-smi", TOOLS / "amd-smi" / "mi300x-rocm61.json")
    det = run_detect(fake_tools.env)
    assert det.hardware == "mi300x" and round(det.gpus[0].memory_gib) == 192


def test_unknown_gpu_model_is_reported_not_guessed(fake_tools):
    fake_tools.add("nvidia-smi", "0, NVIDIA A100-SXM4-80GB, 81920, GPU-x\n")
    det = run_detect(fake_tools.env)
    assert det.hardware is None and det.count == 1 and "A100" in det.reason


def test_mixed_models_are_refused(fake_tools):
    fake_tools.add("nvidia-smi", "0, NVIDIA H200, 143771, GPU-a\n1, NVIDIA H100 80GB HBM3, 81559, GPU-b\n")
    det = run_detect(fake_tools.env)
    assert det.hardware is None and "mixed" in det.reason


# ---------------------------------------------------------------- visibility


@pytest.mark.parametrize("value, count", [(None, 8), ("all", 8), ("0,1,2,3", 4), ("7", 1), ("", 0), ("0,9,1", 1),
                                          ("GPU-h2030000", 1), ("GPU-h2030000-1111-2222-3333-444455556663,0", 2)])
def test_cuda_visible_devices(fake_tools, value, count):
    fake_tools.add("nvidia-smi", TOOLS / "nvidia-smi" / "h200.csv")
    env = dict(fake_tools.env, **({} if value is None else {"CUDA_VISIBLE_DEVICES": value}))
    det = run_detect(env)
    assert det.count == count and (det.hardware == "h200" if count else det.hardware is None)


def test_rocr_then_hip_visible_devices():
    gpus = [Gpu(i, "AMD Instinct MI300X", 192 * 2**30, "amd") for i in range(8)]
    env = {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1,3"}
    assert [g.index for g in visible_gpus(gpus, env)] == [5, 7]
    assert [g.index for g in visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": "2"})] == [2]


# ---------------------------------------------------------------- AMD firmware


def test_mec_firmware_from_sysfs(tmp_path):
    make_kfd_tree(tmp_path, "gfx950", 288 * 2**30, count=2, mec_fw=175)
    assert mec_firmware({"PATH": ""}, str(tmp_path)) == ([175, 175], "sysfs mec_fw_version")


@pytest.mark.parametrize("hw, version", [("mi350x", 175), ("mi355x", 177)])
def test_mec_firmware_from_rocm_smi(fake_tools, tmp_path, hw, version):
    fake_tools.add("rocm-smi", TOOLS / "rocm-smi" / f"{hw}.json", by_arg={"--showfw": TOOLS / "rocm-smi" / f"{hw}-showfw.json"})
    versions, source = mec_firmware(fake_tools.env, str(tmp_path))
    assert set(versions) == {version} and source == "rocm-smi --showfw"


def test_mec_firmware_unreadable(fake_tools, tmp_path):
    fake_tools.add("rocm-smi", TOOLS / "garbage.txt")
    assert mec_firmware(fake_tools.env, str(tmp_path)) == ([], "rocm-smi --showfw: unreadable output")


# ---------------------------------------------------------------- recorded on a real H200


def test_recorded_h200_nvidia_smi(fake_tools):
    fake_tools.add("nvidia-smi", FIXTURES / "h200" / "rec" / "nvidia-smi-query.csv")
    det = run_detect(fake_tools.env)
    assert (det.hardware, det.count) == ("h200", 1)
    assert det.gpus[0].name == "NVIDIA H200" and round(det.gpus[0].memory_gib, 1) == 140.4


def test_sysfs_ignores_cpu_nodes_and_broken_nodes(tmp_path):
    make_kfd_tree(tmp_path, "gfx942", 192 * 2**30, count=1)
    broken = tmp_path / "sys/class/kfd/kfd/topology/nodes/9"
    broken.mkdir()
    probe = probe_sysfs(str(tmp_path))
    assert len(probe.gpus) == 1 and "ignored 1" in probe.saw


def test_recorded_doctor_on_the_h200_machine():
    """kimi-serve doctor --format json as it ran on the device machine (tests/fixtures/h200/README.md)."""
    import json

    report = json.loads((FIXTURES / "h200" / "rec" / "doctor.json").read_text())
    assert report["detection"]["hardware"] == "h200" and report["detection"]["count"] == 1
    gpu_count = next(c for c in report["checks"] if c["check"] == "gpu_count")
    assert gpu_count["status"] == "error" and "needs 8 GPU(s)" in gpu_count["message"]
    assert report["ok"] is False
