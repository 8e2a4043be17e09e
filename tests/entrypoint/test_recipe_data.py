"""The recipe data is validated on load: unknown keys and dangling references are refused."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from entrypoint.core.data.recipe import RecipeDataError, load_catalog_from
from tests.testdata import TAXONOMY

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.fixture()
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    copy = tmp_path / "recipes"
    shutil.copytree(RECIPES, copy, ignore=shutil.ignore_patterns(".validated", "__pycache__"))
    return copy


def edit(path: Path, change):
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_shipped_data_matches_the_reference_facts(data):
    cat = load_catalog_from(data)
    assert sorted(cat.recipe.hardware) == sorted(["h100", "h200", "b200", "gb200", "b300", "gb300", "mi300x",
                                                  "mi325x", "mi350x", "mi355x"])
    assert len(cat.strategies) == 9
    reference = yaml.safe_load(TAXONOMY.read_text())
    for hw, profile in cat.hardware.items():
        ref = reference["hardware_profiles"].get(hw)
        if ref:  # mi350x is not in the taxonomy snapshot: gfx950 with 8 x 288 GB like mi355x
            assert (profile.gpu_count, profile.vram_gb) == (ref["gpu_count"], ref["vram_gb"])
            assert profile.brand == ref["brand"].lower() and profile.generation == ref["generation"]
    assert cat.hardware["mi350x"].gfx == cat.hardware["mi355x"].gfx == "gfx950"
    assert (cat.hardware["mi350x"].gpu_count, cat.hardware["mi350x"].vram_gb) == (8, 2304)
    assert {h for h, p in cat.hardware.items() if p.arch == "arm64"} == {"gb200", "gb300"}


@pytest.mark.parametrize("file, change, words", [
    ("models/kimi-k2.5.yaml", lambda d: d["variants"]["default"].update(vram_min=1), "vram_min"),
    ("models/kimi-k2.5.yaml", lambda d: d["opt_in_features"].append("vision"), "feature 'vision'"),
    ("models/kimi-k2.5.yaml", lambda d: d["compatible_strategies"].append("ring"), "strategy 'ring'"),
    ("models/kimi-k2.5.yaml", lambda d: d["variants"]["mxfp4"].update(supported_hardware=["mi400x"]), "'mi400x'"),
    ("models/kimi-k2.5.yaml", lambda d: d["profiles"]["flydsl"].update(variants=["int8"]), "variant 'int8'"),
    ("models/kimi-k2.5.yaml", lambda d: d["features"]["text_only"].update(conflicts_with=["audio"]), "feature 'audio'"),
    ("models/kimi-linear-48b-a3b-instruct.yaml",  # a refused release the floor refuses already
     lambda d: d["model"]["refused_vllm_versions"].update({"0.11.0": "old"}), "below min_vllm_version 0.11.2"),
    ("models/kimi-linear-48b-a3b-instruct.yaml",
     lambda d: d["model"]["refused_vllm_versions"].update({"0.12": "x"}), "refused_vllm_versions"),
    ("models/kimi-linear-48b-a3b-instruct.yaml", lambda d: d.update(tasks=["audio"]), "tasks"),
    ("hardware.yaml", lambda d: d["hardware"]["mi300x"].pop("gfx"), "gfx"),
    ("hardware.yaml", lambda d: d["hardware"]["h200"].update(gpus=8), "gpus"),
    ("strategies/pd_cluster.yaml", lambda d: d.pop("router"), "router"),
])
def test_broken_data_is_refused(data, file, change, words):
    edit(data / file, change)
    with pytest.raises(RecipeDataError) as info:
        load_catalog_from(data)
    assert words in str(info.value)


def test_validated_cache_is_reused_and_invalidated_by_content(data, tmp_path):
    first = load_catalog_from(data)
    cached = list((tmp_path / "cache" / "kimi-serve").glob("catalog-*.json")) + \
        list((data / ".validated").glob("catalog-*.json"))
    # the catalog and its parts read on demand (KV offload, loaders, bench, preload, fleet, wiring), all of one digest
    assert sorted(p.name.split("-", 2)[-1] for p in cached) == sorted(
        [p.name.split("-")[1] for p in cached if p.name.count("-") == 1] + [f"{s}.json" for s in
                                                                          ("bench", "fleet", "kv_offload", "loaders", "preload", "wiring")])
    main = [p for p in cached if p.name.count("-") == 1]
    assert len(main) == 1 and len({p.name.split("-")[1][:24] for p in cached}) == 1
    assert load_catalog_from(data) == first == load_catalog_from(data, use_cache=False)
    # readable data: plain JSON whose recipe title is the data's
    assert json.loads(main[0].read_text())["catalog"]["fields"]["recipe"]["fields"]["title"] == "Kimi-K2.5"
    edit(data / "models" / "kimi-k2.5.yaml", lambda d: d["variants"]["default"].update(vram_minimum_gb=700))
    assert load_catalog_from(data).recipe.variants["default"].vram_minimum_gb == 700
    edit(data / "models" / "kimi-k2.5.yaml", lambda d: d["variants"]["default"].update(bogus=1))
    with pytest.raises(RecipeDataError):
        load_catalog_from(data)


@pytest.mark.parametrize("garbage", [b"not json", b"{}", b'{"format": 1, "catalog": [1]}', b"\xff\xfe",
                                     b'{"format": 1, "catalog": {"$record": "X"}}', b"[" * 100_000])
def test_corrupt_cache_is_ignored(data, garbage):
    load_catalog_from(data)
    for path in (data / ".validated").glob("catalog-*.json"):
        path.write_bytes(garbage)
    assert load_catalog_from(data).recipe.variants["mxfp4"].tp == 8


def test_a_fifo_in_place_of_the_cache_is_skipped(data):
    import os

    load_catalog_from(data)
    for path in (data / ".validated").glob("catalog-*.json"):
        path.unlink()
        os.mkfifo(path)
    assert load_catalog_from(data).recipe.variants["mxfp4"].tp == 8


def test_the_cache_reads_back_read_only_records(data):
    load_catalog_from(data)
    cached = load_catalog_from(data)
    with pytest.raises(TypeError):
        cached.hardware["h200"] = None
    assert isinstance(cached.recipe.hardware, tuple)


def _main_cache(data) -> Path:
    (found,) = [p for p in (data / ".validated").glob("catalog-*.json") if p.name.count("-") == 1]
    return found


def test_a_cache_under_another_digests_name_is_not_read(data):
    """An older release's cache (its name a SHA-256 of the same files, cut to 24 hex digits) beside
    the data is never read: the name carries the digest of this release's data and schema."""
    import hashlib

    from entrypoint.core.data import recipe

    load_catalog_from(data)
    current = _main_cache(data)
    h = hashlib.sha256()
    for path in [*recipe._SCHEMA_SOURCES, *recipe._data_files(data)]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    stale = current.with_name(f"catalog-{h.hexdigest()[:24]}.json")
    assert stale != current
    stale.write_text(current.read_text().replace('"Kimi-K2.5"', '"stale"'))
    current.unlink()
    assert load_catalog_from(data).recipe.title == "Kimi-K2.5"


def test_a_python_without_blake2_gets_a_digest_of_the_same_length(data, monkeypatch):
    """hashlib has no blake2b without _blake2 either: SHA-256, cut to the same 24 hex digits."""
    import re
    import sys

    load_catalog_from(data)
    with_blake2 = _main_cache(data).name
    import hashlib

    monkeypatch.setitem(sys.modules, "_blake2", None)  # `from _blake2 import ...` raises ImportError
    monkeypatch.delattr(hashlib, "blake2b")  # as hashlib is where _blake2 was not built
    monkeypatch.delattr(hashlib, "blake2s")
    assert load_catalog_from(data).recipe.title == "Kimi-K2.5"
    names = {p.name for p in (data / ".validated").glob("catalog-*.json") if p.name.count("-") == 1}
    assert len(names) == 2 and all(re.fullmatch(r"catalog-[0-9a-f]{24}\.json", n) for n in names)
    assert with_blake2 in names
