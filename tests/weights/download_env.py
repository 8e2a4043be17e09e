"""The environment of a `kimi-serve download` run against the Hub stand-in, and the draft model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from hub_standin import DRAFT_ID, Hub, Repo, draft_repo  # noqa: F401 - re-exported for the tests

KIMI = str(Path(sys.executable).with_name("kimi-serve"))


class Env:
    def __init__(self, tmp: Path, hub: Optional[Hub]):
        self.cache = tmp / "cache"
        self.hub = hub
        self.vars = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp / "home"),
                     "KIMI_HARDWARE": "h200", "KIMI_CACHE_DIR": str(self.cache),
                     "HF_ENDPOINT": hub.url if hub else "http://127.0.0.1:9", "HF_HUB_DISABLE_TELEMETRY": "1",
                     "HF_HUB_DISABLE_UPDATE_CHECK": "1",
                     "KIMI_DOWNLOAD_BACKOFF_S": "0"}  # retry at once (the back-off: test_units.py)

    def run(self, *args, timeout: float = 120, wrap=(), **extra) -> subprocess.CompletedProcess:
        env = {**self.vars, **{k: v for k, v in extra.items() if v is not None}}
        for key in [k for k, v in extra.items() if v is None]:
            env.pop(key, None)
        return subprocess.run([*wrap, KIMI, *args], env=env, capture_output=True, text=True, timeout=timeout)

    def popen_argv(self, *args) -> list:
        return [KIMI, *args]

    def popen(self, *args, **extra) -> subprocess.Popen:
        return subprocess.Popen([KIMI, *args], env={**self.vars, **extra}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def repo_dir(self, repo_id: str) -> Path:
        return self.cache / "huggingface" / "hub" / ("models--" + repo_id.replace("/", "--"))

    def snapshot(self, repo: Repo) -> Path:
        return self.repo_dir(repo.repo_id) / "snapshots" / repo.commit

    def fetched(self, repo: Repo) -> list:
        base = self.snapshot(repo)
        return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
