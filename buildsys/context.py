"""The build context of an image, prepared on the host.

- deps/: the entrypoint's dependencies (pyproject's [project].dependencies) installed with
  `pip install --target --only-binary=:all: --platform ... --python-version ...` for the base's
  platform and Python, so nothing runs pip inside the image and foreign architectures need no
  emulation. Cached by a hash of (requirements, platform, python).
- loaders/: the weight loaders' packages (images/targets.yaml `loader_packages`) for vLLM's own
  Python, without dependencies; the image appends the folder to vLLM's path (a .pth file), so a
  loader the base already carries is the base's.
- code/: the entrypoint package and its data (pyproject's [tool.setuptools] packages,
  package-dir and package-data), plus a minimal dist-info.
- kimi-serve (the launcher), Dockerfile: from images/.
All files get a fixed mtime, so unchanged inputs hit the build cache.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python < 3.11 (requires-python's floor): the backport, a dependency there
    import tomli as tomllib

from buildsys import ROOT, log

CACHE = Path(os.environ.get("KIMI_BUILD_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kimi-serve-build"))
FIXED_MTIME = 1_700_000_000
PIP_PLATFORMS = {
    "linux/amd64": ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"],
    "linux/arm64": ["manylinux2014_aarch64", "manylinux_2_17_aarch64", "manylinux_2_28_aarch64"],
}
IMAGE_FILES = ("Dockerfile", "kimi-serve")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements() -> list:
    return list(pyproject()["project"]["dependencies"])


def _normalise(tree: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
    os.utime(tree, (FIXED_MTIME, FIXED_MTIME))


def deps(platform: str, python: str) -> Path:
    """Host-prepared dependencies for one platform + Python version (cached)."""
    return _pip_target("deps", requirements(), platform, python)


def loaders(platform: str, python: str, packages: Sequence[str]) -> Path:
    """The weight loaders' packages (images/targets.yaml `loader_packages`) for vLLM's Python, without
    their dependencies (torch and numpy are the base's): the image puts them on vLLM's path after
    the base's own site-packages, so a loader the base already has stays the base's."""
    return _pip_target("loaders", list(packages), platform, python, ["--no-deps"])


def _pip_target(kind: str, reqs: list, platform: str, python: str, extra: Sequence[str] = ()) -> Path:
    key = hashlib.sha256(json.dumps([reqs, platform, python, list(extra)]).encode()).hexdigest()[:16]
    out = CACHE / kind / f"{platform.replace('/', '-')}-py{python}-{key}"
    if (out / ".complete").exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile", "--no-warn-conflicts",
            "--root-user-action=ignore", *extra,
            "--target", str(tmp), "--only-binary=:all:", "--implementation", "cp", "--python-version", python]
    for plat in PIP_PLATFORMS[platform]:
        argv += ["--platform", plat]
    if reqs:
        log(f"{kind}: pip install --target for {platform} python {python}: {' '.join(reqs)}")
        subprocess.run(argv + reqs, check=True)
    shutil.rmtree(tmp / "bin", ignore_errors=True)
    for cache_dir in tmp.rglob("__pycache__"):
        shutil.rmtree(cache_dir, ignore_errors=True)
    _normalise(tmp)
    (tmp / ".complete").write_text(json.dumps({"requirements": reqs, "platform": platform, "python": python}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _package_path(pkg: str, package_dir: dict) -> str:
    """Where a package's files are, as setuptools finds them: the longest mapped prefix of its name in
    `package-dir` (entrypoint.recipes_data.models -> recipes/models), else its dotted path."""
    parts = pkg.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in package_dir:
            return "/".join([package_dir[prefix], *parts[cut:]])
    return "/".join(parts)


def copy_code(dest: Path) -> None:
    """The packages pyproject ships, laid out as an installed package would be."""
    meta = pyproject()
    st = meta.get("tool", {}).get("setuptools", {})
    package_dir = st.get("package-dir", {})
    package_data = st.get("package-data", {})
    for pkg in st.get("packages", []):
        src = ROOT / _package_path(pkg, package_dir)
        dst = dest / pkg.replace(".", "/")
        dst.mkdir(parents=True, exist_ok=True)
        if not src.is_dir():
            continue
        patterns = ["*.py"] + list(package_data.get(pkg, []))
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(src).as_posix()
            if path.is_file() and "__pycache__" not in rel and any(fnmatch.fnmatch(rel, p) for p in patterns):
                if "/" in rel and not any("/" in p and fnmatch.fnmatch(rel, p) for p in patterns):
                    continue  # sub-directories are packages of their own (or package-data globs)
                (dst / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dst / rel)
    project = meta["project"]
    dist = dest / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    scripts = project.get("scripts", {})
    (dist / "entry_points.txt").write_text("[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items()))


def prepare(platform: str, python: str, loader_packages: Sequence[str] = ()) -> Path:
    """Refresh and return the build context for one platform + Python version. Two builds on one
    machine share the cache: the refresh holds the context's lock, so one never copies into a folder
    the other is replacing (seen in a full test run: FileNotFoundError under contexts/.../code)."""
    import fcntl

    ctx = CACHE / "contexts" / f"{platform.replace('/', '-')}-py{python}"
    ctx.mkdir(parents=True, exist_ok=True)
    with open(ctx.parent / f"{ctx.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _refresh(ctx, platform, python, loader_packages)


def _refresh(ctx: Path, platform: str, python: str, loader_packages: Sequence[str]) -> Path:
    for name, src in (("deps", deps(platform, python)), ("loaders", loaders(platform, python, loader_packages))):
        marker = ctx / name / ".complete"
        if not marker.exists() or marker.read_text() != (src / ".complete").read_text():
            shutil.rmtree(ctx / name, ignore_errors=True)
            shutil.copytree(src, ctx / name, symlinks=True, copy_function=shutil.copy2)
            _normalise(ctx / name)
    shutil.rmtree(ctx / "code", ignore_errors=True)
    copy_code(ctx / "code")
    _normalise(ctx / "code")
    for name in IMAGE_FILES:
        shutil.copy2(ROOT / "images" / name, ctx / name)
        os.utime(ctx / name, (FIXED_MTIME, FIXED_MTIME))
    (ctx / ".dockerignore").write_text("deps/.complete\n")
    return ctx


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
