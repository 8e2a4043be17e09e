"""The docs name only what exists: every repository path, Python module path and KIMI_* setting that
README.md, docs/*.md, the chart's README and benchmarks/README.md name, and every one the code names
in the words users and readers see (entrypoint/ and buildsys/, read whole: KimiError messages, help,
docstrings, comments), is there.

The rules, in one place:

- a path starting with a top-level folder of the repository (`recipes/fleet.yaml`, `docs/cold-start.md`,
  `tests/live/`) is relative to the repository; one starting with a package of entrypoint/
  (`core/compose/fleet.py`, `render/k8s.py`) is relative to entrypoint/. A line suffix
  (`select.py:191`) is left off; `...` ends the path there (its folder must exist); `*`, `<name>`
  and `{name}` are wildcards (something must match); `core/compose/settings.FIELDS` is a module
  and a name it defines.
- a dotted module path (`entrypoint.core.compose.settings`, `...settings.FIELDS`) is a module or a
  package, optionally followed by a name the module defines.
- a markdown link to a file (`[x](cold-start.md)`) is relative to the document.
- a `KIMI_*` name is a setting (settings.py FIELDS), one of its HELPER_VARIABLES, or a Kubernetes
  service link; `KIMI_KV_*` is a prefix some of those have; a KIMI_* name the code assigns
  (settings.KIMI_FIELDS) is a Python name, not a variable.
- a path in a folder .gitignore names (`recipes/.validated/`) is one the project writes.

A name a document shows on purpose as not existing (a typo the launch refuses) is in NOT_REAL.
"""

from __future__ import annotations

import fnmatch
import re
import time
from functools import lru_cache
from pathlib import Path

from entrypoint.core.compose import settings as settings_mod

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "entrypoint"

# Names shown on purpose as wrong: the example typos that the settings check refuses.
NOT_REAL: frozenset = frozenset({"KIMI_VARIANTS"})  # docs/reliability.md: one edit from KIMI_VARIANT

TOP = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
SHORT = sorted(p.name for p in ENTRYPOINT.iterdir() if p.is_dir() and (p / "__init__.py").exists())

_PATH = re.compile(r"(?<![\w./~$@:\\-])((?:%s)/(?:[\w./*<>{}-]|\$\([^)]*\))*)" % "|".join(map(re.escape, TOP + SHORT)))
_MODULE = re.compile(r"(?<![\w./-])((?:entrypoint|buildsys)(?:\.\w+)+)")
_KIMI = re.compile(r"(?<![\w$])(KIMI_[A-Z0-9_]*[A-Z0-9](?:_?\*)?)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


@lru_cache(maxsize=1)
def declared_settings() -> frozenset:
    return frozenset(f.env for f in settings_mod.FIELDS) | settings_mod.HELPER_VARIABLES


def _defines(module_file: Path, name: str) -> bool:
    text = module_file.read_text()
    return bool(re.search(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]"
                          rf"|^from\s.*\bimport\b.*\b{re.escape(name)}\b", text, re.M))


def _package_dirs() -> dict:
    """pyproject's package-dir: a package the wheel builds from another folder (entrypoint.recipes_data
    is recipes/)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^"([\w.]+)"\s*=\s*"([^"]+)"', section, re.M))


PACKAGE_DIRS = _package_dirs()


def _ignored_names() -> list:
    """.gitignore's patterns for a bare name (`.validated/`): folders the project writes, named in the
    docs, never in a checkout."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return [ln.strip().strip("/") for ln in lines if ln.strip() and not ln.startswith("#")
            and "/" not in ln.strip().strip("/")]


IGNORED = _ignored_names()


def _module_file(parts: list) -> Path | None:
    dotted = ".".join(parts)
    for package, folder in PACKAGE_DIRS.items():
        if dotted == package or dotted.startswith(package + "."):
            folder_path = ROOT / folder / Path(*dotted[len(package) + 1:].split(".")) if dotted != package \
                else ROOT / folder
            return folder_path if folder_path.is_dir() else None
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _dotted_ok(parts: list) -> bool:
    """`a.b.c` a module or package, or `a.b` one and `c` (and what follows) a name it defines."""
    for cut in range(len(parts), 0, -1):
        found = _module_file(parts[:cut])
        if found:
            return cut == len(parts) or (found.is_file() and _defines(found, parts[cut]))
    return False


def _path_ok(path: str, root: Path = ROOT) -> bool:
    if any(fnmatch.fnmatch(part, pattern) for part in path.split("/") for pattern in IGNORED):
        return True  # written by the project (.gitignore), not in a checkout
    if "..." in path:
        path = path.split("...")[0].rsplit("/", 1)[0]
        return (root / path).is_dir()
    if re.search(r"[*<{$]", path):
        pattern = re.sub(r"<[^>]*>|\{[^}]*\}|\$\([^)]*\)", "*", path).rstrip("/")
        return any(True for _ in root.glob(pattern))
    if (root / path).exists() or (root / (path + ".py")).is_file():  # core/data/recipe: a module
        return True
    head, _, last = path.rpartition("/")
    if "." in last:  # core/compose/settings.FIELDS: a module and a name it defines
        module, *names = last.split(".")
        return _dotted_ok([*head.split("/"), module, *names])
    return False


def _clean(token: str) -> str:
    return token.rstrip(".,;:)`'\"")


def check_text(text: str, where: str, doc_dir: Path | None = None) -> list:
    """What `text` names that does not exist, as `where:line: name (why)`; `doc_dir` for its markdown
    links."""
    return [f"{where}:{number}: {finding}" for number, line in enumerate(text.splitlines(), 1)
            for finding in _check_line(line, doc_dir)]


def _check_line(text: str, doc_dir: Path | None) -> list:
    found = []
    declared = declared_settings()
    for match in _PATH.finditer(text):
        path = _clean(match.group(1))
        if path.split("/")[0] in SHORT and path.split("/")[0] not in TOP:
            full = "entrypoint/" + path
        else:
            full = path
        if path not in NOT_REAL and not _path_ok(full):
            found.append(f"{path} (no such path)")
    for match in _MODULE.finditer(text):
        name = _clean(match.group(1))
        if name not in NOT_REAL and not _dotted_ok(name.split(".")):
            found.append(f"{name} (no such module or name)")
    for match in _KIMI.finditer(text):
        name = match.group(1)
        if name in NOT_REAL or name in CODE_NAMES or settings_mod._SERVICE_LINK.fullmatch(name):
            continue
        if name.endswith("*"):
            prefix = name.rstrip("*")
            ok = any(d.startswith(prefix) for d in declared)
        else:
            ok = name in declared
        if not ok:
            found.append(f"{name} (not a setting)")
    if doc_dir is not None:
        for match in _LINK.finditer(text):
            target = match.group(1).split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            if not (doc_dir / target).exists():
                found.append(f"{target} (broken link)")
    return found


def code_files() -> list:
    return sorted(p for d in ("entrypoint", "buildsys") for p in (ROOT / d).rglob("*.py"))


# KIMI_* names the code defines as its own identifiers (settings.KIMI_FIELDS), not variables.
CODE_NAMES = frozenset(name for path in code_files()
                       for name in re.findall(r"^(KIMI_\w+)\s*[:=]", path.read_text(), re.M))


def documents() -> list:
    return [ROOT / "README.md", ROOT / "charts" / "kimi-serve" / "README.md", ROOT / "benchmarks" / "README.md",
            *sorted((ROOT / "docs").glob("*.md"))]


def all_findings() -> list:
    """The documents, and the code's whole text: its messages, help, docstrings and comments."""
    found = []
    for doc in documents():
        found += check_text(doc.read_text(), str(doc.relative_to(ROOT)), doc.parent)
    for path in code_files():
        found += check_text(path.read_text(), str(path.relative_to(ROOT)))
    return found


def test_docs_name_only_what_exists():
    start = time.monotonic()
    found = all_findings()
    assert not found, "named but not there:\n" + "\n".join(found)
    assert time.monotonic() - start < 5


def test_the_checker_finds_a_planted_bad_name(tmp_path):
    doc = tmp_path / "planted.md"
    doc.write_text("See core/compose/nothing.py:12, entrypoint/core/loading.py, core/mask.mask_output,\n"
                   "entrypoint.core.compose.nothing, entrypoint.core.compose.settings.NOT_A_NAME,\n"
                   "KIMI_RECIPIE, KIMI_NOPE_*, docs/loading.md, tests/nothing/..., recipes/*.toml\n"
                   "and [a link](missing.md).\n"
                   'raise KimiError(INVALID_VALUE, "KIMI_LOAD_FORMAT: see docs/gone.md")\n')
    found = check_text(doc.read_text(), "planted.md", tmp_path)
    for name in ("core/compose/nothing.py", "entrypoint/core/loading.py", "core/mask.mask_output",
                 "entrypoint.core.compose.nothing", "entrypoint.core.compose.settings.NOT_A_NAME",
                 "KIMI_RECIPIE", "KIMI_NOPE_*", "docs/loading.md", "tests/nothing/", "recipes/*.toml",
                 "missing.md", "docs/gone.md"):
        assert any(f": {name} (" in f for f in found), (name, found)
    assert "planted.md:5: docs/gone.md (no such path)" in found
    assert not any("KIMI_LOAD_FORMAT" in f for f in found)


def test_the_checker_passes_what_exists(tmp_path):
    text = ("core/compose/select.py:191, entrypoint/core/compose/fleet.py, recipes/fleet.yaml, tests/live/...,\n"
            "entrypoint.core.compose.settings, entrypoint.core.compose.settings.FIELDS, "
            "core/compose/settings.FIELDS,\nKIMI_RECIPE, KIMI_VENV, KIMI_SERVICE_HOST, recipes/*.yaml, "
            "benchmarks/results/<name>.json, [link](../README.md)\n")
    sub = tmp_path / "docs"
    sub.mkdir()
    (tmp_path / "README.md").write_text("")
    assert check_text(text, "fine.md", sub) == []
