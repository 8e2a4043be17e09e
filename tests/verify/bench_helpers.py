"""What the bench tests share: the command as a user runs it, a copy of the recipe data with a
workload small enough for a CPU server (and a made-up reference for it), and a `vllm` stand-in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TINY = {"input_len": 32, "output_len": 8, "description": "32 in / 8 out: small enough for a tiny model on a CPU"}
# A made-up reference for h200 (not a published figure): it only shows the comparison's arithmetic.
TINY_REFERENCE = {"recipe": "kimi-k2.5", "hardware": "h200", "variant": "default", "tensor_parallel": 8,
                  "engine": "test", "workload": "tiny",
                  "points": [{"concurrency": 1, "output_tokens_per_s_per_gpu": 10},
                             {"concurrency": 2, "output_tokens_per_s_per_gpu": 20},
                             {"concurrency": None, "output_tokens_per_s_per_gpu": 40}],
                  "source": "tests/verify/bench_helpers.py (made up)", "url": "https://example.invalid", "date": "2026-12-01"}


def recipes_with_tiny_workload(tmp: Path) -> Path:
    target = tmp / "recipes"
    shutil.copytree(ROOT / "recipes", target, ignore=shutil.ignore_patterns(".validated", "__pycache__"))
    data = yaml.safe_load((target / "bench" / "benchmarks.yaml").read_text())
    data["workloads"]["tiny"] = TINY
    data["references"].append(TINY_REFERENCE)
    (target / "bench" / "benchmarks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def fake_vllm_dir(tmp: Path) -> Path:
    """A directory whose `vllm` is tests/verify/fake_vllm.py (run by this Python)."""
    bin_dir = tmp / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / "vllm"
    program.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).with_name('fake_vllm.py')} \"$@\"\n")
    program.chmod(0o755)
    return bin_dir


def bench_env(path_dirs=(), hardware: str = "h200", **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "FAKE_VLLM"))}
    env.update(KIMI_HARDWARE=hardware, KIMI_SKIP_MEMORY_CHECK="1",
               PATH=os.pathsep.join([*map(str, path_dirs), "/usr/local/bin", "/usr/bin", "/bin"]), **extra)
    return env


def kimi_serve(*args: str, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
