"""The wheel (and so every image, which pip-installs it) ships every package of the entrypoint: the
explicit `packages` list in pyproject.toml names each folder with an __init__.py (as setuptools'
find_packages finds them), so a new package (e.g. entrypoint/app/) is never left out of the install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

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


def _source_copy(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new files not ignored), copied: the build
    writes build/ and *.egg-info beside its sources, which stays out of the checkout."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.mark.slow
@pytest.mark.serial  # pip's build isolation beside the other tool installs
def test_the_sdist_and_wheel_build_without_a_warning_and_ship_every_recipe_file(tmp_path):
    """`python -m build` (sdist, then the wheel from the sdist, in an isolated environment with
    build-system.requires) prints no warning, and the wheel holds every recipe data file."""
    src = _source_copy(tmp_path / "src")
    # PYTHONDONTWRITEBYTECODE makes setuptools warn "byte-compiling is disabled": the caller's setting, not ours
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run = subprocess.run([sys.executable, "-m", "build", "--outdir", str(tmp_path / "dist"), str(src)],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    warnings = [line for line in output.splitlines() if "warn" in line.lower() and "Location 'file:" not in line]
    assert not warnings, "\n".join(warnings)
    wheel, = (tmp_path / "dist").glob("*.whl")
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("entrypoint/recipes_data/")}
    data = {"entrypoint/recipes_data/" + n for n in listed_recipes(src)}
    assert data and data <= shipped, sorted(data - shipped)


def listed_recipes(root: Path) -> list:
    """The recipe data files of a checkout (recipes/), as paths under it."""
    return [str(p.relative_to(root / "recipes")) for p in (root / "recipes").rglob("*")
            if p.is_file() and p.suffix in (".yaml", ".json", ".py") and "__pycache__" not in p.parts]
