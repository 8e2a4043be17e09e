"""Every configuration of tests/data/golden/kimi-k2.5.json resolves to exactly its expected processes."""

import json
import subprocess
import sys

import pytest

from entrypoint.app import build
from entrypoint.core.errors import KimiError
from entrypoint.core.recipe import load_catalog

from golden_data import GOLDEN, golden_cases

CASES = golden_cases()
# The site renders the recipe for its vLLM floor (model.min_vllm_version): on newer vLLM the plan
# drops what vLLM removed (recipe vllm_env_removed; test_golden_on_the_newest_vllm).
FLOOR = {"KIMI_VLLM_VERSION": load_catalog().recipe.model.min_vllm_version}  # the one floor: the recipe's


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_golden_case(case, catalog):
    try:
        got = build({**case["settings"], **FLOOR}, catalog=catalog).plan.as_dict()
    except KimiError as err:
        got = {"error": err.code}
    assert got == case["expect"]
    if "processes" in got:  # env order is part of what the site renders
        for mine, theirs in zip(got["processes"], case["expect"]["processes"]):
            assert list(mine["env"]) == list(theirs["env"])


def test_golden_through_the_batch_cli(tmp_path):
    """`plan --batch` renders every golden case in one process, one JSON line each, errors included."""
    lines = [json.dumps({**c["settings"], **FLOOR}) for c in CASES]
    src = tmp_path / "cases.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--batch", str(src)],
                         capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(results) == len(CASES)
    for case, result in zip(CASES, results):
        if "error" in case["expect"]:
            assert result["error"]["code"] == case["expect"]["error"]
            assert result["error"]["message"]
        else:
            assert result == case["expect"], case["id"]


def test_golden_file_is_in_the_repository():
    assert GOLDEN.is_file(), "tests read the golden launches from tests/data/golden"
    assert len(CASES) >= 100


def test_golden_on_the_newest_vllm(catalog):
    """On the newest vLLM each golden plan differs only by the VLLM_* variables that release no
    longer knows. What it knows is vLLM's own list (its grammar file, written from vLLM by
    `build.py vllm-spec`), not the recipe's `vllm_env_removed` that the code applies."""
    from entrypoint.core.vllm_cli import load_spec, newest_version

    known = load_spec(newest_version()).env
    differ = 0
    for case in CASES:
        if "error" in case["expect"]:
            continue
        got = build({**case["settings"], "KIMI_VLLM_VERSION": newest_version()}, catalog=catalog).plan.as_dict()
        for mine, theirs in zip(got["processes"], case["expect"]["processes"]):
            assert mine["argv"] == theirs["argv"]
            assert mine["env"] == {k: v for k, v in theirs["env"].items()
                                   if not k.startswith("VLLM_") or k in known}, case["id"]
            differ += mine["env"] != theirs["env"]
    assert differ > 0
