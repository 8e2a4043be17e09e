"""Linters that run offline: hadolint (Dockerfiles), check-jsonschema and actionlint (workflows, with
shellcheck on their `run:` scripts), shellcheck (scripts). All come with the test extras."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import IN_CI, ROOT

DOCKERFILES = sorted((ROOT / "images").rglob("Dockerfile*"))
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
SCRIPTS = [ROOT / ".ci" / "run", *sorted((ROOT / "scripts").glob("*.sh"))]


def _tool(name):
    path = shutil.which(name) or (str(Path(sys.executable).parent / name) if (Path(sys.executable).parent / name).exists() else None)
    if not path:
        if IN_CI:
            pytest.fail(f"{name} is not installed (pip install -e '.[test]')")
        pytest.skip(f"{name} is not installed")
    return path


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint_clean(dockerfile):
    proc = subprocess.run([_tool("hadolint"), "--config", str(ROOT / "images" / ".hadolint.yaml"), str(dockerfile)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_workflows_valid():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "publish.yml"}
    proc = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                           *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflows_take_targets_from_build_py():
    """No per-target literals in workflows: the matrix comes from `build.py matrix`."""
    from buildsys import targets

    publish = (ROOT / ".github" / "workflows" / "publish.yml").read_text()
    assert "build.py matrix" in publish
    for name in targets.load().targets:
        for wf in WORKFLOWS:
            assert f" {name}" not in wf.read_text() and f"-{name}" not in wf.read_text(), (wf.name, name)


def test_actionlint_reports_nothing():
    """actionlint knows each action's runtime (node20 is gone) and inputs, and runs shellcheck on
    every `run:` script; it must say nothing about any workflow."""
    proc = subprocess.run([_tool("actionlint"), "-shellcheck", _tool("shellcheck"), "-oneline", *map(str, WORKFLOWS)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_actionlint_would_catch_a_retired_runtime_and_a_script_problem(tmp_path):
    """The check above can fail: an action on node20 and an unquoted variable are reported."""
    wf = tmp_path / ".github" / "workflows" / "bad.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
                  "      - uses: actions/checkout@v4\n      - run: echo $HOME\n")
    proc = subprocess.run([_tool("actionlint"), "-shellcheck", _tool("shellcheck"), "-oneline", str(wf)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert "node20" in proc.stdout and "SC2086" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shellcheck(script):
    proc = subprocess.run([_tool("shellcheck"), str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
