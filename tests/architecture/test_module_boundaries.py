"""Modules meet through their public names: no module of entrypoint/ reaches into the interpreter's
module table (`sys.modules`, e.g. to hand a module itself to a helper that then calls its private
functions), and none reads another entrypoint module's private name (`k8s._meta`, `from
entrypoint.render.k8s_pod import _container_security`). A private module of a package (the CLI's
`_context`) is its package's own: its siblings import it. An AST scan, shown live on planted code."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "entrypoint"
CODE = sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_module(name: str, root: Path) -> bool:
    """Whether a dotted name under entrypoint is a module or a package of the tree at `root`."""
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _allowed_private(target: str, own: str, own_package: str) -> bool:
    """`target` (a private name's full dotted path) may be read from `own`: a module's own names, or
    a private module (or package) of `own`'s package or one above it."""
    parent = target.rpartition(".")[0]
    return parent == own or (own_package == parent or own_package.startswith(parent + "."))


def violations(path: Path, root: Path = ROOT) -> list:
    """`line: what` for each `sys.modules` and each read of another entrypoint module's private name."""
    tree = ast.parse(path.read_text(), str(path))
    own = _module_name(path, root)
    own_package = _package(own, path.name == "__init__.py")
    bound = {}  # a local name -> the entrypoint module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("entrypoint.") or alias.name == "entrypoint":
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound.setdefault("entrypoint", "entrypoint")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package
                anchor = own_package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if not (base == "entrypoint" or base.startswith("entrypoint.")):
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if _is_module(target, root):
                    bound[alias.asname or alias.name] = target
                if _private(alias.name) and not _allowed_private(target, own, own_package):
                    found.append(f"{node.lineno}: from {base} import {alias.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id == "sys":
            found.append(f"{node.lineno}: sys.modules")
            continue
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        module = bound[value.id]
        for attr in chain:  # walk down submodules: the first name that is no module is the one read
            if _is_module(f"{module}.{attr}", root):
                module = f"{module}.{attr}"
                if _private(attr) and not _allowed_private(module, own, own_package):
                    found.append(f"{node.lineno}: {value.id}.{'.'.join(chain)}")
                    break
                continue
            if _private(attr) and module != own:
                found.append(f"{node.lineno}: {value.id}.{'.'.join(chain)}")
            break
    return sorted(set(found), key=lambda hit: int(hit.split(":")[0]))


def test_no_module_reaches_into_another():
    found = [f"{p.relative_to(ROOT)}:{hit}" for p in CODE for hit in violations(p)]
    assert not found, ("import a module's public names (make the helper public, or move it to a module both "
                       "import); never sys.modules:\n" + "\n".join(found))


def test_the_scan_is_live(tmp_path):
    """Planted reaches are found: sys.modules, a module's private function read through the module,
    through a package path and by a from-import; a module's own private names, a private module of
    the package (from a sibling) and public names are left alone."""
    pkg = tmp_path / "entrypoint"
    (pkg / "render").mkdir(parents=True)
    (pkg / "cli").mkdir()
    for init in (pkg / "__init__.py", pkg / "render" / "__init__.py", pkg / "cli" / "__init__.py"):
        init.write_text("")
    (pkg / "render" / "a.py").write_text("def _meta():\n    return 1\n\n\ndef meta():\n    return _meta()\n")
    (pkg / "cli" / "_context.py").write_text("def echo():\n    pass\n")
    bad = pkg / "render" / "b.py"
    bad.write_text("import sys\n"
                   "import entrypoint.render.a as alias\n"
                   "from entrypoint.render import a\n"
                   "from entrypoint.render.a import _meta\n"
                   "import entrypoint\n"
                   "x = sys.modules[__name__]\n"
                   "y = a._meta()\n"
                   "z = alias._meta\n"
                   "w = entrypoint.render.a._meta\n"
                   "v = a.meta()\n")
    assert [hit.split(":")[0] for hit in violations(bad, tmp_path)] == ["4", "6", "7", "8", "9"]
    good = pkg / "cli" / "c.py"
    good.write_text("from entrypoint.cli import _context\nfrom entrypoint.cli._context import echo\n"
                    "from entrypoint.render import a\n\n\ndef _own():\n    return _context.echo(), a.meta()\n\n\n"
                    "_own()\n")
    assert violations(good, tmp_path) == []
    outsider = pkg / "render" / "d.py"
    outsider.write_text("from entrypoint.cli import _context\n")
    assert [hit.split(":")[0] for hit in violations(outsider, tmp_path)] == ["1"]
