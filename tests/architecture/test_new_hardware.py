"""A new hardware target is data only: a temporary copy of recipes/ gains a made-up GPU (`x900`,
no code has ever heard of it), and every command works on it with no code change, through
KIMI_RECIPES_DIR, in real `kimi-serve` subprocesses (doctor with a fake nvidia-smi on PATH)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NEW_ID = "x900"
NEW_HARDWARE = {
    "brand": "nvidia", "generation": "blackwell", "display_name": "X900",
    "description": "A made-up 8-GPU node of 240 GB GPUs, known only to this test's data",
    "gpu_count": 8, "vram_gb": 1920, "arch": "amd64", "k8s_product": "NVIDIA-X900", "image_target": "b200",
    "pod_resources": {"cpu": 64, "memory_gib": 1024},
    "detect": {"names": ["X900"], "memory_gb": 240},
}


def data_with_new_hardware(tmp_path_factory) -> Path:
    """A copy of recipes/ whose hardware.yaml has the made-up GPU."""
    copy = tmp_path_factory.mktemp("data") / "recipes"
    shutil.copytree(ROOT / "recipes", copy, ignore=shutil.ignore_patterns(".validated"))
    hardware = yaml.safe_load((copy / "hardware.yaml").read_text())
    hardware["hardware"][NEW_ID] = NEW_HARDWARE
    (copy / "hardware.yaml").write_text(yaml.safe_dump(hardware, sort_keys=False))
    return copy


@pytest.fixture(scope="module")
def recipes(tmp_path_factory) -> Path:
    copy = data_with_new_hardware(tmp_path_factory)
    recipe = yaml.safe_load((copy / "models" / "kimi-k2.5.yaml").read_text())
    recipe["hardware"].append(NEW_ID)
    (copy / "models" / "kimi-k2.5.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return copy


def kimi(recipes: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {"PATH": os.environ["PATH"], "HOME": str(recipes.parent), "KIMI_RECIPES_DIR": str(recipes),
               "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], env=environ, capture_output=True, text=True,
                          timeout=120, cwd=recipes.parent)


def test_the_new_id_is_unknown_to_the_real_data():
    assert NEW_ID not in yaml.safe_load((ROOT / "recipes" / "hardware.yaml").read_text())["hardware"]


@pytest.mark.slow
def test_print_and_plan_in_every_format(recipes, tmp_path):
    out = kimi(recipes, "print", "--format", "json", KIMI_HARDWARE=NEW_ID)
    assert out.returncode == 0, out.stderr
    argv = json.loads(out.stdout)["argv"]
    assert argv[:3] == ["vllm", "serve", "moonshotai/Kimi-K2.5"] and "--tensor-parallel-size" in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    for fmt in ("shell", "json"):
        out = kimi(recipes, "plan", "--format", fmt, KIMI_HARDWARE=NEW_ID)
        assert out.returncode == 0 and "moonshotai/Kimi-K2.5" in out.stdout, out.stderr
    two_nodes = {"KIMI_HARDWARE": NEW_ID, "KIMI_NODES": "2", "KIMI_STRATEGY": "multi_node_tp"}
    for fmt, env in (("compose", {"KIMI_HARDWARE": NEW_ID}), ("k8s", {"KIMI_HARDWARE": NEW_ID}), ("k8s", two_nodes)):
        where = tmp_path / f"{fmt}-{len(env)}"
        out = kimi(recipes, "plan", "--format", fmt, "--output", str(where), **env)
        assert out.returncode == 0, out.stderr
        text = "".join(p.read_text() for p in where.iterdir())
        assert "ghcr.io/kimi-serve/kimi:0.33.0-b200" in text
        if fmt == "k8s":
            assert "nvidia.com/gpu.product: NVIDIA-X900" in text and "nvidia.com/gpu: '8'" in text


def test_list_shows_it(recipes):
    out = kimi(recipes, "list", "--format", "json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert listed["hardware"][NEW_ID]["name"] == "X900"


def test_doctor_detects_it_with_fake_tools(recipes, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    rows = "".join(f"{i}, NVIDIA X900, 245760, GPU-x900-{i}\n" for i in range(8))
    (tmp_path / "smi.csv").write_text(rows)
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec /bin/cat {tmp_path / 'smi.csv'}\n")
    smi.chmod(0o755)
    out = kimi(recipes, "doctor", "--format", "json", PATH=f"{bindir}:{os.environ['PATH']}",
               KIMI_CACHE_DIR=str(tmp_path / "cache"), KIMI_HARDWARE="auto")  # detection asked for, as print
    report = json.loads(out.stdout)
    assert report["detection"]["hardware"] == NEW_ID and report["detection"]["count"] == 8, out.stderr
    assert report["launch"]["hardware"] == NEW_ID
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["gpu_count"]["status"] == "ok" and checks["hardware"]["status"] == "ok"
    assert checks["firmware"]["status"] == "skipped"
