"""Images on the current vLLM release, the floor still buildable: images/targets.yaml's releases,
the tag flavour that carries the vLLM version, the base tags and the baked KIMI_VLLM_VERSION."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from buildsys import engine, targets
from entrypoint.core.data.recipe import load_catalog
from entrypoint.core.vllm.vllm_cli import available_versions, newest_version

ROOT = Path(__file__).resolve().parents[2]


def test_cuda_and_rocm_build_on_the_newest_release_by_default():
    data = targets.load()
    assert data.vllm_version == newest_version()
    for kind in ("cuda", "rocm"):
        assert data.bases[kind].tag == f"v{newest_version()}"
    assert all(data.vllm_version in data.target_releases(name) for name in data.targets)


def test_the_floor_stays_buildable_with_its_own_tags():
    data = targets.load()
    floor = load_catalog().recipe.model.min_vllm_version
    old = data.for_release(floor)
    assert old.bases["cuda"].ref.endswith(f":v{floor}") and old.bases["cuda"].name == data.bases["cuda"].name
    assert old.tags("h200", "r.example", "abc1234") == [f"r.example/kimi:{floor}-h200",
                                                        f"r.example/kimi:abc1234-{floor}-h200"]
    assert data.tags("h200", "r.example")[:2] == [f"r.example/kimi:{newest_version()}-h200",
                                                  "r.example/kimi:h200"]
    assert engine.build_args(old, "h200", old.bases["cuda"].ref)["KIMI_VLLM_VERSION"] == floor
    assert engine.build_args(data, "h200", data.bases["cuda"].ref)["KIMI_VLLM_VERSION"] == newest_version()
    assert "rocm-gfx950" not in old.targets  # the gfx950 target lists only the releases it supports


def test_every_release_has_its_grammar_and_a_missing_one_is_refused(tmp_path):
    assert set(targets.load().releases) <= set(available_versions())
    raw = yaml.safe_load(targets.TARGETS_FILE.read_text())
    raw["other_releases"]["0.20.0"] = {"cuda": {"tag": "v0.20.0"}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(targets.TargetsError, match=re.escape("no vLLM grammar for 0.20.0")):
        targets.load(path)
    raw["other_releases"]["0.18.0"] = raw["other_releases"].pop("0.20.0")
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(targets.TargetsError, match="older"):
        targets.load(path)


def test_lock_writes_every_releases_digests(tmp_path):
    path = tmp_path / "t.yaml"
    shutil.copy(targets.TARGETS_FILE, path)
    new, old = "sha256:" + "ab" * 32, "sha256:" + "cd" * 32
    targets.save_digests({"cuda": new}, path, {"0.19.1": {"rocm": old}})
    data = targets.load(path)
    assert data.bases["cuda"].digest == new and data.for_release("0.19.1").bases["rocm"].digest == old
    assert data.for_release("0.19.1").bases["cuda"].digest is None
    assert "# Older vLLM releases" in path.read_text()


@pytest.mark.slow
def test_build_cli_lists_a_release():
    out = subprocess.run([sys.executable, str(ROOT / "build.py"), "list", "--format", "json", "--vllm", "0.19.1"],
                         capture_output=True, text=True, check=True)
    rows = {r["target"]: r for r in json.loads(out.stdout)}
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert rows["h200"]["tags"] == ["ghcr.io/kimi-serve/kimi:0.19.1-h200",  # every tag a build creates
                                    *([f"ghcr.io/kimi-serve/kimi:{sha}-0.19.1-h200"] if sha else [])]
    assert rows["h200"]["base"].endswith("vllm-openai:v0.19.1")
    bad = subprocess.run([sys.executable, str(ROOT / "build.py"), "list", "--vllm", "0.5.0"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "0.33.0" in bad.stderr
