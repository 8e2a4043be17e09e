"""Every configuration of tests/data/golden/kimi-k2.5-kv.json (the recipe site's KV Offload row)
resolves to exactly its expected processes, with the files they need."""

import json

import pytest

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError
from golden_data import plan_batch, without_drain
from tests.testdata import GOLDEN_KV

GOLDEN = json.loads(GOLDEN_KV.read_text())
CASES = GOLDEN["cases"]
# The project's deliberate difference: the LMCache server is bound to its pod (lmcache's default is 0.0.0.0).
LMCACHE_BIND = ["--http-host", "127.0.0.1"]


def _check_files(want_files: dict, var: str, path: str, got_files: dict):
    assert path.startswith("/"), f"{var} is an absolute path, got {path!r}"
    assert path in got_files, f"{var}={path} is among the files the entrypoint writes"
    content = json.loads(got_files[path])
    want = want_files[var]
    # The file holds the recipe's keys with exactly these values (types too); the real component may need more.
    assert {k: content.get(k, KeyError) for k in want} == want
    assert all(type(content[k]) is type(v) for k, v in want.items())


def _compare(expect: dict, got: dict, removed: set):
    assert {(p["role"], p["rank"]) for p in got["processes"]} == {(p["role"], p["rank"]) for p in expect["processes"]}
    mine = {(p["role"], p["rank"]): p for p in got["processes"]}
    for want in expect["processes"]:
        have = mine[(want["role"], want["rank"])]
        files = have.get("files", {})
        argv = list(want["argv"]) + (LMCACHE_BIND if want["role"] == "lmcache" else [])
        assert len(have["argv"]) == len(argv)
        for w, g in zip(argv, have["argv"]):
            if w.startswith("@file:"):
                _check_files(want["files"], w[6:], g, files)
            else:
                assert g == w
        env = {k: v for k, v in want["env"].items() if k not in removed}
        assert set(have["env"]) == set(env)
        for key, w in env.items():
            if w == "@file":
                _check_files(want["files"], key, have["env"][key], files)
            else:
                assert have["env"][key] == w, key
        assert len(files) == len(want.get("files", {})), "no file beyond those the process names"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_golden_kv_case(case, catalog):
    removed = set() if "KIMI_VLLM_VERSION" in case["settings"] else set(catalog.vllm_env_removed)
    try:
        got = without_drain(build(case["settings"], catalog=catalog).plan.as_dict())
    except KimiError as err:
        assert err.message
        got = {"error": err.code}
    if "error" in case["expect"]:
        assert got == case["expect"]
    else:
        assert "error" not in got, got
        _compare(case["expect"], got, removed)


@pytest.mark.slow
def test_golden_kv_through_the_batch_cli(tmp_path):
    """`plan --format json --batch` prints the files with the processes, one JSON line per case."""
    results = plan_batch(tmp_path, CASES)
    from entrypoint.core.data.recipe import load_catalog

    removed = set(load_catalog().vllm_env_removed)
    for case, result in zip(CASES, results):
        if "error" in case["expect"]:
            assert result["error"]["code"] == case["expect"]["error"], case["id"]
        else:
            _compare(case["expect"], result, set() if "KIMI_VLLM_VERSION" in case["settings"] else removed)


def test_golden_kv_covers_every_kind():
    kinds = {(c["settings"]["KIMI_KV_OFFLOAD"], "error" in c["expect"]) for c in CASES}
    assert len(CASES) == 180
    for option in ("simple", "lmcache", "kv_store_centralized_mooncake", "kv_store_distributed_mooncake"):
        assert (option, False) in kinds and (option, True) in kinds
    assert ("offloading_cpu", True) in kinds and ("offloading_fs", True) in kinds
