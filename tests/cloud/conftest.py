"""Helpers for the cloud tests: the platforms' own client libraries (the `cloud` extra) and the
plan rendered for a platform through the real CLI code path (entrypoint.app.deploy.deployment_launch)."""

from __future__ import annotations

import importlib
import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(module: str):
    """Import a platform library of the `cloud` extra: skip locally without it, fail in CI."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if IN_CI:
            pytest.fail(f"CI=true but {module} is missing: pip install -e '.[test,cloud]' ({exc})", pytrace=False)
        pytest.skip(f"{module} not installed (pip install -e '.[test,cloud]')")


def render(fmt: str, env: dict) -> dict:
    from entrypoint.app.deploy import deployment_launch
    from entrypoint.cli.plan import FILE_RENDERERS

    module = importlib.import_module(FILE_RENDERERS[fmt])
    return module.render(deployment_launch(module, env))
