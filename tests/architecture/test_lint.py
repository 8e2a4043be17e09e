"""The code is lint-clean and type-clean (issue 40): `ruff check` with the rules in pyproject.toml
[tool.ruff] and `mypy` with [tool.mypy] (entrypoint/, buildsys/, build.py) exit 0. Both are run
from the test environment's own executables (the `test` extra pins them); each is shown live on a
planted defect."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} is a test dependency (pip install -e '.[test]')"
    return found


def _run(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_ruff_finds_nothing():
    run = _run(_tool("ruff"), "check", "--no-cache", ".")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


def test_ruff_reports_a_planted_defect(tmp_path):
    """The project's rules, on a file with an undefined name and a function-level import."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    import json\n\n    return json.dumps(undefined_name)\n")
    run = _run(_tool("ruff"), "check", "--no-cache", "--output-format", "concise", "--config",
               str(ROOT / "pyproject.toml"), str(planted))
    assert run.returncode == 1
    assert "planted.py:4:23: F821" in run.stdout and "planted.py:2:5: PLC0415" in run.stdout, run.stdout


@pytest.mark.slow  # a cold cache: 8-16 s on two shared cores (1 s warm)
@pytest.mark.serial  # mypy's cache (.mypy_cache), shared with the next
def test_mypy_finds_nothing():
    run = _run(_tool("mypy"))
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Success: no issues found" in run.stdout


@pytest.mark.slow
@pytest.mark.serial  # mypy's cache
def test_mypy_types_a_setting(tmp_path):
    """mypy sees each setting's own type (KIMI_NODES is an int, never None): a str read of it fails."""
    planted = tmp_path / "planted.py"
    planted.write_text("from entrypoint.core.compose.settings import read_settings\n\n"
                       "nodes: int = read_settings({}).nodes\n"
                       "model: str = read_settings({}).model\n")
    run = _run(_tool("mypy"), "--config-file", str(ROOT / "pyproject.toml"), str(planted))
    assert run.returncode == 1, run.stdout
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "planted.py:4:" in errors[0] and '"str | None"' in errors[0], run.stdout
