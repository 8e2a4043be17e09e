"""`kimi-serve download` as a user runs it (a subprocess, the real huggingface_hub client) against
the Hub stand-in on 127.0.0.1 (HF_ENDPOINT), with a fresh cache per test."""

from __future__ import annotations

import shutil

import pytest
from download_env import Env, draft_repo
from hub_standin import Hub, kimi_like_repo


@pytest.fixture
def repos():
    main, wanted = kimi_like_repo()
    return main, wanted, draft_repo()


@pytest.fixture
def hub(repos):
    main, _, draft = repos
    with Hub([main, draft]) as running:
        yield running


@pytest.fixture
def env(tmp_path, hub):
    (tmp_path / "home").mkdir()
    e = Env(tmp_path, hub)
    yield e
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
