"""The layers are enforced by import-linter's own contracts (pyproject.toml [tool.importlinter])."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> str:
    found = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert found, "import-linter is a test dependency (pip install -e '.[test]')"
    return found


def test_import_contracts_hold():
    run = subprocess.run([_lint_imports()], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_a_broken_layer_is_reported(tmp_path):
    """The contract is live: a core module importing the CLI breaks it."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "entrypoint", copy / "entrypoint", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    bad = copy / "entrypoint" / "core" / "args.py"
    bad.write_text(bad.read_text() + "\nfrom entrypoint.cli import main  # noqa\n")
    run = subprocess.run([_lint_imports()], cwd=copy, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"})
    assert run.returncode != 0
    assert "entrypoint.core.args -> entrypoint.cli" in run.stdout
