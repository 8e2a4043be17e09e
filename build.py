#!/usr/bin/env python3
"""build.py: build, smoke-test, push and describe the kimi-serve images.

    python build.py list                       # targets, bases, platforms, tags
    python build.py standins                   # stand-in bases for tests (cached) -> overrides
    python build.py build [TARGET...] [--push] [--registry R] [--base-override KIND=IMAGE] [--smoke]
    python build.py smoke [TARGET...] [--pull]  # --pull: from the registry first
    python build.py bake -o docker-bake.json   # for docker/bake-action
    python build.py matrix [TARGET...]         # GitHub Actions matrix
    python build.py lock                       # resolve base tags to digests (writes images/targets.yaml)
    python build.py vllm-spec --python VENV/bin/python  # vLLM's serve grammar -> recipes/vllm/<version>.json

The facts (targets, bases, platforms, hardware) live in images/targets.yaml; the code is in buildsys/.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    from buildsys.cli import run
except ImportError as exc:  # the project's own dependencies are missing: say what to install
    sys.exit(f"build.py: error: {exc.name or exc} is not installed; install the build tool's dependencies in a "
             "virtual environment: python3 -m venv .venv && .venv/bin/pip install -e '.[build]'")

if __name__ == "__main__":
    run()
