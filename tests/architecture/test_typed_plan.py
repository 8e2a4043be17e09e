"""The plan is typed and read through its facts: no module outside vLLM's grammar module
(entrypoint/core/vllm/vllm_cli.py) slices or indexes a process's argv, and no consumer of the plan
(the node, the renderers, verify, the commands, the composition root, the build system) parses
vLLM arguments with the grammar again: they read `Process.kind`, `.ports`, `.vllm` (the
effective arguments, parsed once) and the Plan's derived facts. An AST scan, shown live on planted
code."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARSER = ROOT / "entrypoint" / "core" / "vllm" / "vllm_cli.py"
CODE = sorted(p for d in ("entrypoint", "buildsys") for p in (ROOT / d).rglob("*.py")) + [ROOT / "build.py"]
CONSUMERS = [p for p in CODE if p.parts[-2] in ("node", "render", "verify", "cli", "app", "buildsys")]
# The grammar's readers of argument text; a consumer reads the typed process instead.
GRAMMAR_READERS = {"values", "parse", "engine_args", "flag_value", "int_value", "dedupe"}


def _argv_subscripts(path: Path) -> list:
    """`x.argv[...]` / `argv[...]` (an index or a slice), `sys.argv` aside: line numbers."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Subscript):
            continue
        target = node.value
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else None
        if name != "argv":
            continue
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "sys":
            continue
        found.append(node.lineno)
    return found


def _grammar_imports(path: Path) -> list:
    """Names of the grammar's argument readers a module imports from vllm_cli."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("vllm_cli"):
            found += [f"{node.lineno}: {a.name}" for a in node.names if a.name in GRAMMAR_READERS]
    return found


# The serialised names of the processes that are not vLLM engines: a kind, not a role, says what a process is.
HELPER_ROLES = {"router", "master", "store", "lmcache"}


def _role_kind_tests(path: Path) -> list:
    """`x.role == "router"` / `x.role in ("router", ...)` and friends: line numbers."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "role"):
            continue
        for right in node.comparators:
            words = [right] if isinstance(right, ast.Constant) else getattr(right, "elts", [])
            if any(isinstance(w, ast.Constant) and w.value in HELPER_ROLES for w in words):
                found.append(node.lineno)
    return found


def test_is_this_an_engine_is_asked_one_way():
    found = [f"{p.relative_to(ROOT)}:{line}" for p in CODE for line in _role_kind_tests(p)]
    assert not found, "ask proc.is_engine / proc.kind, not the role's name:\n" + "\n".join(found)


def test_no_module_but_the_parser_slices_argv():
    found = [f"{p.relative_to(ROOT)}:{line}" for p in CODE if p != PARSER for line in _argv_subscripts(p)]
    assert not found, "read Process.program / .args / .vllm instead of slicing argv:\n" + "\n".join(found)


def test_no_consumer_parses_vllm_arguments_again():
    found = [f"{p.relative_to(ROOT)}:{hit}" for p in CONSUMERS for hit in _grammar_imports(p)]
    assert not found, "read Process.vllm (the effective arguments, parsed once) instead:\n" + "\n".join(found)


def test_the_scans_are_live(tmp_path):
    """The same functions find planted slices (of a process's argv, of a bare argv, an index) and
    grammar imports, and leave `sys.argv[1:]` and other subscripts alone."""
    planted = tmp_path / "x.py"
    planted.write_text("import sys\nfrom entrypoint.core.vllm.vllm_cli import values, spec_for\n"
                       "a = proc.argv[3:]\nb = argv[:2]\nc = proc.argv[0]\nd = sys.argv[1:]\ne = proc.args[1:]\n")
    assert _argv_subscripts(planted) == [3, 4, 5]
    assert _grammar_imports(planted) == ["2: values"]
    planted.write_text('a = p.role == "router"\nb = p.role in ("single", "master")\nc = p.role == "single"\n'
                       'd = sel.role == role\n')
    assert _role_kind_tests(planted) == [1, 2]
    assert CONSUMERS and PARSER in CODE and all(p.exists() for p in CONSUMERS)
