"""The layers are enforced by import-linter's own contracts (pyproject.toml [tool.importlinter])."""

from __future__ import annotations

import ast
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


def _lint_a_copy_with(tmp_path, module: str, added: str, package: str = "entrypoint") -> str:
    """lint-imports' report on a copy of the packages where `module` (a path under `package`/)
    ends with `added`; the run must fail."""
    copy = tmp_path / "repo"
    for root in ("entrypoint", "buildsys"):
        shutil.copytree(ROOT / root, copy / root, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    bad = copy / package / module
    bad.write_text(bad.read_text() + added)
    run = subprocess.run([_lint_imports()], cwd=copy, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"})
    assert run.returncode != 0
    return run.stdout


def test_a_broken_layer_is_reported(tmp_path):
    """The contract is live: a core module importing the CLI breaks it."""
    out = _lint_a_copy_with(tmp_path, "core/vllm/args.py", "\nfrom entrypoint.cli import main  # noqa\n")
    assert "entrypoint.core.vllm.args -> entrypoint.cli" in out


def test_an_import_cycle_between_siblings_is_reported(tmp_path):
    """The sibling-acyclicity contract is live: a function-level import that closes a cycle
    (core.data.datadir -> core.compose.settings -> core.vllm.mask -> core.vllm.vllm_cli -> core.data.datadir) breaks it."""
    out = _lint_a_copy_with(tmp_path, "core/data/datadir.py",
                            "\n\ndef _planted():\n    from entrypoint.core.compose.settings import BY_NAME  # noqa\n")
    assert "No import cycles between siblings BROKEN" in out
    assert "No cycles are allowed in entrypoint.core" in out


def test_the_entrypoint_importing_the_build_system_is_reported(tmp_path):
    """The image's package never needs the build system: even a function-level import breaks it."""
    out = _lint_a_copy_with(tmp_path, "core/data/versions.py",
                            "\n\ndef _planted():\n    from buildsys import targets  # noqa\n")
    assert "The entrypoint never imports the build system BROKEN" in out
    assert "entrypoint.core.data.versions -> buildsys.targets" in out


def test_the_build_system_reaching_the_node_is_reported(tmp_path):
    out = _lint_a_copy_with(tmp_path, "targets.py", "\nfrom entrypoint.node import detect  # noqa\n", "buildsys")
    assert "The build system reaches the entrypoint below its commands and beside the node BROKEN" in out
    assert "buildsys.targets -> entrypoint.node.detect" in out


def test_a_broken_build_system_layer_is_reported(tmp_path):
    """The data layer (images/targets.yaml's model) importing the engine breaks build's layers."""
    out = _lint_a_copy_with(tmp_path, "targets.py", "\nfrom buildsys import engine  # noqa\n", "buildsys")
    assert "Build system layers: cli -> chart | smoke | vllm_spec -> chart_fleet | engine ->" in out
    assert "buildsys.targets -> buildsys.engine" in out


def test_the_grammar_extractor_importing_the_entrypoint_is_reported(tmp_path):
    out = _lint_a_copy_with(tmp_path, "vllm_spec_extract.py", "\nfrom entrypoint.core.base import limits  # noqa\n",
                            "buildsys")
    assert "vLLM's grammar extractor does not import the entrypoint" in out


def _top_imports(path: Path) -> set:
    tree = ast.parse(path.read_text())
    return ({n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            | {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            | {"." for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level})


def test_the_grammar_extractor_imports_the_stdlib_and_vllm_only():
    """build.py vllm-spec runs it as a script under a vLLM environment's Python: its own package
    (buildsys' __init__, beyond import-linter's contracts) is not there."""
    found = _top_imports(ROOT / "buildsys" / "vllm_spec_extract.py")
    assert "vllm" in found
    assert found - set(sys.stdlib_module_names) == {"vllm"}


def test_the_data_directory_lookup_reads_the_declared_variable(tmp_path):
    """core/data/datadir.py is a leaf (no project import), so it names KIMI_RECIPES_DIR itself: the
    name is the settings' declaration, and setting it moves every reader of the data."""
    from entrypoint.core.compose.settings import BY_NAME
    from entrypoint.core.data import datadir

    tree = ast.parse((ROOT / "entrypoint" / "core" / "data" / "datadir.py").read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + \
        [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and m.startswith("entrypoint")]
    assert datadir.RECIPES_DIR_ENV == BY_NAME["recipes_dir"].env
    assert datadir.default_recipes_dir({datadir.RECIPES_DIR_ENV: str(tmp_path)}) == tmp_path
    assert (datadir.default_recipes_dir({}) / "models" / "kimi-k2.5.yaml").is_file()


def test_default_release_imports_nothing_when_called():
    """Review (issue 40): core/compose/select.py's default_release (every plan asks it) has its imports at
    module level: neither module imports select, so there is no cycle to break."""
    import ast
    import inspect

    from entrypoint.core.compose import select

    tree = ast.parse(inspect.getsource(select.default_release))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
