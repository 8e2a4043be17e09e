"""Issue 39: a vLLM release the data does not record (no recipes/vllm/<version>.json) is never
judged silently by another release's grammar: plan, print and the container's start say, in one
line, which recorded grammar judges it and why, and how to record its own. A release is ASCII
digits (x.y.z): full-width or other Unicode digits are no release."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from entrypoint.core.vllm.vllm_cli import available_versions, grammar_version, newest_version, unrecorded_note

ENV = {"KIMI_HARDWARE": "h200", "KIMI_RECIPE": "kimi-k2-thinking"}


def run(command, **env):
    full = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **ENV, **env}
    return subprocess.run([sys.executable, "-m", "entrypoint", *command], env=full, capture_output=True,
                          text=True, timeout=120)


def _after(version: str) -> str:
    major, minor, patch = map(int, version.split("."))
    return f"{major}.{minor}.{patch + 1}"


def test_a_recorded_release_is_judged_by_its_own_grammar_and_says_nothing():
    for version in available_versions():
        assert grammar_version(version) == version and unrecorded_note(version) is None


def test_a_newer_patch_is_judged_by_the_newest_recorded_grammar_and_says_so():
    newest = newest_version()
    version = _after(newest)
    note = unrecorded_note(version)
    assert grammar_version(version) == newest
    assert f"vLLM {version} is not a recorded release" in note and f"vLLM {newest}'s grammar" in note
    assert "build.py vllm-spec" in note and "\n" not in note
    done = run(["print"], KIMI_VLLM_VERSION=version)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and "note:" in done.stderr and f"vLLM {newest}'s grammar" in done.stderr
    done = run(["plan", "--format", "json"], KIMI_VLLM_VERSION=version)
    assert done.returncode == 0 and f"vLLM {newest}'s grammar" in done.stderr


def test_a_release_below_every_recorded_one_names_the_oldest():
    oldest = available_versions()[0]
    assert "0.12.0" not in available_versions()  # K2-Thinking's floor, planned by the site's goldens
    assert grammar_version("0.12.0") == oldest
    assert "oldest recorded release" in unrecorded_note("0.12.0")


def test_the_start_logs_it_as_a_warning():
    done = run([], KIMI_VLLM_VERSION=_after(newest_version()), KIMI_DRY_RUN="1", KIMI_PREFLIGHT="off")
    assert done.returncode == 0, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "not a recorded release" in line]
    assert len(lines) == 1 and "warning" in lines[0].lower(), lines


@pytest.mark.parametrize("spelled", ["０.３３.０", "٠.٣٣.٠", "0.３3.0"])
def test_a_release_in_other_digits_is_refused(spelled):
    done = run(["print"], KIMI_VLLM_VERSION=spelled)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "is not a vLLM release like" in done.stderr
