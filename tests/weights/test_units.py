"""The pure parts of the download: which repositories a plan reads, which files of them, progress."""

from __future__ import annotations

import io
import json
from fnmatch import fnmatch

import pytest

from entrypoint.app.launch import build
from entrypoint.core.compose.weights import exact_pattern, select_files, sources
from entrypoint.core.data.recipe import load_catalog
from entrypoint.node.hub_cache import read_tree
from entrypoint.node.logs import StartLog
from entrypoint.node.progress import Progress

RULES = load_catalog().recipe.model.files
DRAFT = "lightseekorg/kimi-k2.5-eagle3-mla"


def _sources(**env):
    return [(s.repo_id, s.revision, s.purpose, s.weights) for s in sources(build({"KIMI_HARDWARE": "h200", **env}).plan)]


def test_the_plan_names_the_checkpoint_and_the_draft_model():
    assert _sources() == [("moonshotai/Kimi-K2.5", "main", "model", True), (DRAFT, "main", "draft model", True)]
    assert _sources(KIMI_FEATURES="-spec_decoding") == [("moonshotai/Kimi-K2.5", "main", "model", True)]
    assert _sources(KIMI_HARDWARE="gb200", KIMI_VARIANT="nvfp4")[0][0] == "nvidia/Kimi-K2.5-NVFP4"


@pytest.mark.slow
def test_the_revision_pins_the_model_not_the_draft():
    got = _sources(KIMI_MODEL_REVISION="v1.0")
    assert got[0][1] == "v1.0" and got[1][1] == "main"  # vLLM gives the draft its own revision
    spec = json.dumps({"model": DRAFT, "method": "eagle3", "num_speculative_tokens": 3, "revision": "abc123"})
    got = _sources(KIMI_EXTRA_ARGS=f"--speculative-config '{spec}'")
    assert got[1] == (DRAFT, "abc123", "draft model", True)


def test_a_separate_tokenizer_repo_and_local_paths():
    got = _sources(KIMI_EXTRA_ARGS="--tokenizer org/tok --tokenizer-revision t1", KIMI_FEATURES="-spec_decoding")
    assert got[1] == ("org/tok", "t1", "tokenizer", False)
    assert _sources(KIMI_MODEL="/models/kimi", KIMI_FEATURES="-spec_decoding") == []


def test_files_at_the_top_only_and_the_first_weights_pattern():
    listing = ["config.json", "a.safetensors", "sub/b.safetensors", "docs/x.json", "README.md", "pytorch_model.bin",
               "tokenization_kimi.py", "chat_template.jinja", "tiktoken.model"]
    assert select_files(listing, RULES) == ["a.safetensors", "chat_template.jinja", "config.json", "tiktoken.model",
                                            "tokenization_kimi.py"]
    assert select_files(listing, RULES, weights=False) == ["chat_template.jinja", "config.json", "tiktoken.model",
                                                           "tokenization_kimi.py"]


def test_exact_pattern_matches_only_its_path():
    for path in ("model[1].safetensors", "a*b?.json", "plain.json"):
        assert fnmatch(path, exact_pattern(path))
    assert not fnmatch("model1.safetensors", exact_pattern("model[1].safetensors"))


def test_progress_lines_carry_bytes_rate_and_eta():
    text, js = io.StringIO(), io.StringIO()
    for fmt, stream in (("text", text), ("json", js)):
        progress = Progress("download", 1000, 4, StartLog(fmt, {}, stream), stream=stream, interval_s=0, tty=False)
        bar = progress.hub_bar_class()(unit="B", desc="Reconstructing", total=0)
        bar.update(250)
        progress.hub_bar_class()(total=4, desc="Fetching 4 files").update(1)
    first = text.getvalue().splitlines()[0]
    assert "250 B of 1.0 kB (25%)" in first and "/s" in first and "ETA" in first
    record = json.loads(js.getvalue().splitlines()[0])
    assert record["event"] == "download.progress" and record["bytes"] == 250 and record["total_bytes"] == 1000
    assert record["eta_s"] is not None and record["rate_bytes_s"] > 0


def test_a_corrupt_or_foreign_listing_is_no_listing(tmp_path):
    trees = tmp_path / "trees"
    trees.mkdir()
    commit = "a" * 40
    (trees / f"{commit}.json").write_text("{not json")
    assert read_tree(tmp_path, commit) is None
    (trees / f"{commit}.json").write_text(json.dumps({"format_version": 2, "files": {}}))
    assert read_tree(tmp_path, commit) is None
    (trees / f"{commit}.json").write_text(json.dumps({"format_version": 1, "files": {"x": {"size": 1, "blob_id": "b"}}}))
    assert read_tree(tmp_path, commit)["x"].etag == "b"


@pytest.mark.parametrize("setting,delays", [({}, [2, 4, 8, 16, 32]), ({"KIMI_DOWNLOAD_BACKOFF_S": "20"}, [20, 40, 60, 60, 60]),
                                            ({"KIMI_DOWNLOAD_BACKOFF_S": "0"}, [0, 0, 0, 0, 0])])
def test_retries_back_off_as_documented(setting, delays):
    """The real back-off, with the sleep injected: doubling from KIMI_DOWNLOAD_BACKOFF_S, capped at
    60 s, then one clear error naming the attempts."""
    from entrypoint.core.base.errors import KimiError
    from entrypoint.core.compose.weights import Source
    from entrypoint.node import weights
    from entrypoint.node.logs import StartLog

    slept = []

    def flaky():
        raise ConnectionError("connection refused")

    source = Source(repo_id="moonshotai/Kimi-K2.5", revision="main", purpose="model")
    with pytest.raises(KimiError, match="after 6 attempt"):
        weights._retrying("listing", flaky, source, setting, StartLog("text", {}, io.StringIO()), sleep=slept.append)
    assert slept == delays
