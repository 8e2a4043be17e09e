"""The wheel (and so every image, which pip-installs it) ships every package of the entrypoint: the
explicit `packages` list in pyproject.toml names each folder with an __init__.py (as setuptools'
find_packages finds them), so a new package (e.g. entrypoint/app/) is never left out of the install."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def find_packages(root: Path) -> set:
    """Every folder under root/entrypoint with an __init__.py, as a dotted package name."""
    return {".".join(init.parent.relative_to(root).parts) for init in (root / "entrypoint").rglob("__init__.py")
            if "__pycache__" not in init.parts}


def declared() -> set:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_every_entrypoint_package_is_declared_for_the_wheel():
    found = find_packages(ROOT)
    assert found, "setuptools found no entrypoint package"
    missing = found - declared()
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {sorted(missing)}: the wheel would leave them out"


def test_the_check_sees_a_package_missing(tmp_path):
    (tmp_path / "entrypoint" / "newpkg").mkdir(parents=True)
    (tmp_path / "entrypoint" / "__init__.py").write_text("")
    (tmp_path / "entrypoint" / "newpkg" / "__init__.py").write_text("")
    found = find_packages(tmp_path)
    assert found - declared() == {"entrypoint.newpkg"}


def test_every_data_folder_is_a_declared_package():
    """The recipe data ships as entrypoint.recipes_data (recipes/): each of its folders is a
    package of its own in `packages`, else setuptools warns that it would be ignored (issue 40)."""
    folders = {"entrypoint.recipes_data." + p.name for p in (ROOT / "recipes").iterdir()
               if p.is_dir() and p.name.isidentifier() and any(p.glob("*.*"))}  # not the cache (.validated)
    assert folders and not folders - declared()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert folders <= set(data)


def test_the_license_is_an_spdx_expression():
    """A table (`{text = ...}`) is deprecated by setuptools (a warning at every install, issue 40)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
