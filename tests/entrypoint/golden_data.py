"""The golden launches (tests/data/golden, see tests/data/PROVENANCE.md): one file per recipe."""

import json
import subprocess
import sys

from tests.testdata import GOLDEN, GOLDEN_DIR

RECIPE_GOLDENS = ("kimi-k2-instruct", "kimi-k2-thinking", "kimi-k2.5", "kimi-k2.6", "kimi-k2.7-code", "kimi-k3",
                  "kimi-linear-48b-a3b-instruct")


def _golden(slug: str) -> dict:
    path = GOLDEN if slug == "kimi-k2.5" else GOLDEN_DIR / f"{slug}.json"
    return json.loads(path.read_text())


def golden_cases(slug: str = "kimi-k2.5"):
    return _golden(slug)["cases"]


def refused_cases():
    """(slug, release, case): every configuration of a golden that names `refused_vllm_versions`
    (Kimi-Linear: 0.12.0, "a known Kimi-Linear regression"), at each release it names, which the
    project must refuse with `unsupported_combination`."""
    return [(slug, release, c) for slug in RECIPE_GOLDENS for release in _golden(slug).get("refused_vllm_versions", [])
            for c in golden_cases(slug) if "expect" in c]


def family_cases():
    """(slug, case) of every recipe's golden, the cases the site's rendering is kept for."""
    return [(slug, c) for slug in RECIPE_GOLDENS for c in golden_cases(slug) if "expect" in c]


def excluded_cases():
    """(slug, case) the golden marks `excluded`: renderings the project refuses or corrects."""
    return [(slug, c) for slug in RECIPE_GOLDENS for c in golden_cases(slug) if "excluded" in c]


def plan_batch(tmp_path, cases) -> list:
    """The cases' settings through one real `kimi-serve plan --format json --batch` process: one
    JSON object per case, in order."""
    src = tmp_path / "cases.jsonl"
    src.write_text("".join(json.dumps(c["settings"]) + "\n" for c in cases))
    out = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", "json", "--batch", str(src)],
                         capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(results) == len(cases)
    return results
