"""Issue 27, the bounded parts: one catalog of every data file, bounded reads of every input, one
mask for every sink, one writer, and the sweep. Each test is a user's (or an image builder's)
input that used to hang, leak or be read as something else; it runs the real command."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from entrypoint.core import datadir

from .harness import base_env, run_proc

H200 = {"KIMI_HARDWARE": "h200"}
EXIT_BROKEN_IMAGE = 3


def recipes_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "recipes"
    shutil.copytree(datadir.default_recipes_dir({}), copy, ignore=shutil.ignore_patterns(".validated", "__pycache__"))
    return copy


def broken_image(result, *words):
    """Exit 3 (a defect of the image), one line on stderr, naming what is wrong."""
    assert result.code == EXIT_BROKEN_IMAGE, result.text[-2000:]
    assert "Traceback" not in result.text and len(result.err.strip().splitlines()) == 1, result.err
    for word in words:
        assert word in result.err, result.err
    return result


# ---------------------------------------------------------------- 1: one catalog of every data file

DATA_FILES = ["kv_offload.yaml", "loaders.yaml", "vllm/0.33.0.json", "vllm/0.19.1.json", "bench/benchmarks.yaml",
              "platforms.yaml", "models/kimi-k3.yaml", "strategies/pd_cluster.yaml"]


@pytest.mark.parametrize("name", DATA_FILES)
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_data_file_that_is_not_a_regular_file_is_refused(tmp_path, name, kind):
    copy = recipes_copy(tmp_path)
    (copy / name).unlink()
    if kind == "fifo":
        os.mkfifo(copy / name)
    elif kind == "directory":
        (copy / name).mkdir()
    else:
        (copy / name).symlink_to("/dev/zero")
    env = base_env(**H200, KIMI_RECIPES_DIR=str(copy), KIMI_KV_OFFLOAD="simple")
    broken_image(run_proc(["print"], env, timeout=60), str(copy / name), "not a regular file")


@pytest.mark.parametrize("name, text, words", [
    ("kv_offload.yaml", "options: [\n", "not valid YAML (line 2"),
    ("loaders.yaml", "load_formats: {}\nextra: 1\n", "is invalid"),
    ("vllm/0.32.0.json", "{", "not valid JSON"),
    ("vllm/0.32.0.json", '{"vllm_version": "0.32.0", "options": [{"dest": "x"}], "env": []}', "options[0]"),
    ("bench/benchmarks.yaml", "a: " + "[" * 40 + "]" * 40 + "\n", "nests deeper than 32"),
    ("bench/benchmarks.yaml", "- 1\n", "must be a mapping"),
    ("models/kimi-k3.yaml", "id: [1, 2]\n", "is invalid"),
])
def test_a_broken_data_file_is_one_line_naming_the_file(tmp_path, name, text, words):
    copy = recipes_copy(tmp_path)
    (copy / name).write_text(text)
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), str(copy / name), words)


def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", ["kv_offload.yaml", "loaders.yaml", "models/kimi-k2.5.yaml", "hardware.yaml"])
def test_yaml_aliases_that_expand_to_billions_are_refused(tmp_path, name):
    copy = recipes_copy(tmp_path)
    (copy / name).write_text(billion_laughs())  # 700 bytes; 9^10 values once expanded
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), str(copy / name),
                 "aliases are expanded")


def test_a_recursive_alias_is_refused(tmp_path):
    copy = recipes_copy(tmp_path)
    (copy / "loaders.yaml").write_text("a: &a [1, *a]\n")
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), "loaders.yaml",
                 "refers to the value that contains it")


def test_a_huge_data_file_is_refused(tmp_path):
    from entrypoint.core import limits

    copy = recipes_copy(tmp_path)
    with open(copy / "kv_offload.yaml", "wb") as fh:
        fh.truncate(limits.MAX_DATA_FILE_BYTES + 1)  # sparse: no disk used
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), "kv_offload.yaml",
                 f"larger than {limits.MAX_DATA_FILE_BYTES}")


def _edit_yaml(path: Path, change) -> None:
    import yaml

    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("name, change, words", [
    ("models/kimi-k2.5.yaml", lambda d: d.update(kv_offload_support={"lmcash": "verified"}),
     "kv_offload_support: unknown KV offload option 'lmcash' (valid: lmcache, "),
    ("models/kimi-k2.5.yaml", lambda d: d.update(kv_cache_strategy_hardware={"kv_store_mooncake": ["h200"]}),
     "kv_cache_strategy_hardware: unknown KV store 'kv_store_mooncake' (valid: kv_store_centralized_mooncake"),
    ("models/kimi-k2.5.yaml",
     lambda d: d.update(kv_cache_strategy_hardware={"kv_store_centralized_mooncake": ["h201"]}),
     "kv_cache_strategy_hardware.kv_store_centralized_mooncake: unknown hardware 'h201'"),
    ("kv_offload.yaml", lambda d: d["options"]["lmcache"].update(strategies=["single_node_tpp"]),
     "options.lmcache.strategies: unknown strategy 'single_node_tpp'"),
    ("kv_offload.yaml", lambda d: d["stores"]["kv_store_centralized_mooncake"].update(
        brands=["nvidia", "intel"], install={"nvidia": "x", "intel": "x"}),
     "stores.kv_store_centralized_mooncake.brands: unknown brand 'intel'"),
    ("loaders.yaml", lambda d: d["loaders"]["instanttensor"].update(brands=["nvdia"]),
     "loaders.instanttensor.brands: unknown brand 'nvdia'"),
    ("loaders.yaml", lambda d: d["checkpoints"].update({"kimi-k9": {"default": 1}}),
     "checkpoints: unknown recipe 'kimi-k9'"),
    ("loaders.yaml", lambda d: d["checkpoints"]["kimi-k2.5"].update(fp2=1),
     "checkpoints.kimi-k2.5: unknown variant 'fp2'"),
    ("bench/benchmarks.yaml", lambda d: d["references"][0].update(hardware="h201"),
     "references[0].hardware: unknown hardware 'h201'"),
])
def test_a_dangling_reference_names_the_file_and_the_key(tmp_path, name, change, words):
    copy = recipes_copy(tmp_path)
    _edit_yaml(copy / name, change)
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), str(copy / name), words)


def test_every_part_of_the_catalog_is_validated_once_and_read_from_the_cache(tmp_path, monkeypatch):
    """One digest covers every data file; the KV, loader and bench parts are cached beside the
    catalog, so a KV launch reads JSON, not YAML (and imports neither yaml nor pydantic)."""
    import subprocess
    import sys

    copy = recipes_copy(tmp_path)
    env = base_env(**H200, KIMI_RECIPES_DIR=str(copy), KIMI_KV_OFFLOAD="lmcache", PYTHONPATH=str(Path(__file__).parents[2]))
    assert run_proc(["print"], env).code == 0
    parts = sorted(p.name.split("-", 2)[2] if p.name.count("-") == 2 else "" for p in (copy / ".validated").iterdir())
    assert parts == ["", "bench.json", "kv_offload.json", "loaders.json"]
    probe = ("import sys, runpy; sys.argv = ['kimi-serve', 'print']\n"
             "try:\n    runpy.run_module('entrypoint', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "print('yaml' in sys.modules, 'pydantic' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert out.stderr.strip().splitlines()[-1] == "False False", out.stderr
    (copy / "kv_offload.yaml").write_text((copy / "kv_offload.yaml").read_text() + "\n# a change\n")
    assert run_proc(["print"], env).code == 0  # validated again: a new digest
    assert len(list((copy / ".validated").iterdir())) == 8
