"""`kimi-serve print` stays cheap to start (issue 27; benchmarks/startup.py measures it): with the
validated catalog cached, it imports none of the modules below, each of which it once imported
for nothing or for one call. Not a timing: the modules a real `print` loads, read from sys.modules.

- importlib.metadata (with email, zipfile, csv): the installed vLLM's version is read from its
  dist-info by node/dist_info.py;
- hashlib (OpenSSL): the catalog's digest is BLAKE2b from _blake2 (core/data/recipe.py);
- socket, subprocess, shutil, tempfile: imported where a name is looked up, a tool is run, the
  launch is recorded (node/cluster.py, node/detect.py, node/platform.py); the hostname is
  os.uname()'s;
- entrypoint.node.detect (GPU detection): only with KIMI_HARDWARE=auto;
- yaml and pydantic: the data is read from the cache as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_IMPORTED = ("importlib.metadata", "email", "zipfile", "csv", "hashlib", "_hashlib", "socket", "subprocess",
                "shutil", "tempfile", "entrypoint.node.detect", "yaml", "pydantic")
# Runs `print` in this interpreter and reports which of the modules it loaded (beyond what click,
# the one dependency `print` imports, loads by itself on this Python).
PROBE = """
import json, runpy, sys
watched = json.loads(sys.argv[1])
import click
before = set(sys.modules)
sys.argv = ["kimi-serve", "print"]
try:
    runpy.run_module("entrypoint", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps([m for m in watched if m in sys.modules and m not in before]), file=sys.stderr)
"""


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "VLLM_", "HF_"))}
    return {**env, "PYTHONPATH": str(ROOT), "KIMI_HARDWARE": "h200", **extra}


@pytest.mark.parametrize("extra", [{}, {"KIMI_KV_OFFLOAD": "lmcache"}], ids=["print", "print, KV offload"])
def test_print_imports_nothing_it_does_not_use(extra):
    env = _env(**extra)
    warm = subprocess.run([sys.executable, "-m", "entrypoint", "print"], env=env, capture_output=True, text=True,
                          cwd="/", timeout=120)  # fills the validated-catalog cache when the data is new
    assert warm.returncode == 0, warm.stderr
    run = subprocess.run([sys.executable, "-c", PROBE, json.dumps(NOT_IMPORTED)], env=env, capture_output=True,
                         text=True, cwd="/", timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == warm.stdout  # the same launch
    assert json.loads(run.stderr.strip().splitlines()[-1]) == []


def test_the_probe_sees_an_eager_import(tmp_path):
    """The check can fail: a copy of the package whose print_launch imports socket at the top."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "entrypoint", copy / "entrypoint", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "recipes", copy / "recipes", ignore=shutil.ignore_patterns(".validated"))
    module = copy / "entrypoint" / "cli" / "print_launch.py"
    module.write_text(module.read_text().replace("import json\n", "import json\nimport socket  # noqa\n", 1))
    env = {**_env(), "PYTHONPATH": str(copy), "KIMI_RECIPES_DIR": str(copy / "recipes")}
    assert subprocess.run([sys.executable, "-m", "entrypoint", "print"], env=env, capture_output=True, cwd="/",
                          timeout=120).returncode == 0
    run = subprocess.run([sys.executable, "-c", PROBE, json.dumps(NOT_IMPORTED)], env=env, capture_output=True,
                         text=True, cwd="/", timeout=120)
    assert json.loads(run.stderr.strip().splitlines()[-1]) == ["socket"]
