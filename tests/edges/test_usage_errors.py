"""Issue 40's usage classes (repros s5-15, s5-22): a flag that a command would drop is refused, not
dropped (`plan --output` with a format or mode that prints to standard output); a KIMI_ROLE the
plan does not have names the setting that makes that role, on one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

H200 = {"KIMI_HARDWARE": "h200"}


def run(args, **env):
    full = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **H200, **env}
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], env=full, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("args", [["--format", "json"], ["--format", "shell"], []])
def test_output_with_a_format_that_prints_is_refused_and_nothing_is_written(tmp_path, args):
    out = tmp_path / "out"
    done = run(["plan", *args, "--output", str(out)])
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "--output" in done.stderr and "standard output" in done.stderr
    assert not out.exists()


def test_output_with_batch_is_refused(tmp_path):
    batch = tmp_path / "in.jsonl"
    batch.write_text('{"KIMI_HARDWARE": "h200"}\n')
    done = run(["plan", "--format", "json", "--batch", str(batch), "--output", str(tmp_path / "out")])
    assert done.returncode == 2 and "--batch prints to standard output" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_file_format_still_writes_under_output(tmp_path):
    done = run(["plan", "--format", "compose", "--output", str(tmp_path / "out")])
    assert done.returncode == 0, done.stderr
    assert any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("role, env, setting", [
    ("preload", {}, "KIMI_PRELOAD=1"),
    ("router", {"KIMI_REPLICAS": "2", "KIMI_ROUTER": "none"}, "KIMI_REPLICAS"),
    ("router", {}, "KIMI_ROUTER"),
    ("prefill", {}, "KIMI_STRATEGY=pd_cluster"),
])
def test_a_role_the_plan_lacks_names_the_setting_that_makes_it(role, env, setting):
    done = run(["plan"], KIMI_ROLE=role, **env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and setting in done.stderr and "unset KIMI_ROLE" in done.stderr


@pytest.mark.parametrize("fmt", ["shell", "json", "k8s", "compose"])
def test_the_engine_and_the_weight_cache_never_share_a_port(tmp_path, fmt):
    """Repro s5-03: KIMI_PRELOAD's sidecar health port is the engine's API port: refused in every
    format (one pod on Kubernetes, one host elsewhere), naming KIMI_PORT."""
    done = run(["plan", "--format", fmt], KIMI_PRELOAD="1", KIMI_VLLM_VERSION="0.32.0", KIMI_PORT="8790")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "8790" in done.stderr
    assert "KIMI_PORT" in done.stderr and done.stderr.count("\n") == 1
    assert run(["plan", "--format", fmt], KIMI_PRELOAD="1", KIMI_VLLM_VERSION="0.32.0",
               KIMI_PORT="8791").returncode == 0
