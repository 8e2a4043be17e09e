"""Every pair of settings the chart judges one at a time, on every recipe x hardware x offered
strategy, by hand (not a test: about 25 minutes for three recipes on 2 cores):

    python -m tests.chart.pairs [RECIPE...]

The chart's tables hold plan's verdict per setting (and per the pairs buildsys/chart.py knows
matter). A pair whose plan verdict is not what its two settings' verdicts give alone (an
interaction: a profile that needs a variant, a release whose grammar lacks a variant's flag) is
where the tables can be wrong: for each such pair the chart is asked (`helm template`) and every
disagreement printed. It exits 1 when there is one. test_agreement.py samples at random in every
run."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from buildsys.chart import _probe_nodes
from entrypoint.core.compose.select import offered_strategies
from entrypoint.core.data.recipe import load_catalog, with_recipe
from tests.chart.helm import hook_verdict, install
from tests.chart.sample import LOAD_FORMATS, MODELS, VLLM_VERSIONS
from tests.chart.test_agreement import _charts, _plan, values_of

PAIRS = [("variant", "vllm_version"), ("variant", "features"), ("variant", "profile"), ("vllm_version", "features"),
         ("vllm_version", "profile"), ("profile", "features"), ("vllm_version", "load_format"),
         ("variant", "load_format"), ("variant", "model"), ("vllm_version", "model")]


def _bases(catalog, slug: str):
    """Each hardware x offered strategy of a recipe, a multi-node one on the chart's probe nodes
    (a head and a worker, and the recipe's GPU floor)."""
    cat = with_recipe(catalog, slug)
    for hw in cat.recipe.hardware:
        for sid in offered_strategies(cat, hw):
            base = {"recipe": slug, "hardware": hw, "strategy": sid}
            if cat.strategies[sid].deploy_type == "multi_node":
                base["nodes"] = _probe_nodes(cat, sid, hw)
            yield base


def chart_refusal(helm, settings: dict, tmp: Path):
    """The chart's refusal of the settings (helm's error, or its pre-install check's verdict), or None."""
    ((charted, rendered),) = _charts(helm, [values_of(settings, {})], tmp)
    return rendered if charted is None else hook_verdict(rendered)


def main(only) -> int:
    helm, catalog, tmp, started = install(), load_catalog(), Path(tempfile.mkdtemp()), time.time()
    checked = interactions = disagreements = 0
    for slug, recipe in catalog.recipes.items():
        if only and slug not in only:
            continue
        dims = {"variant": sorted(recipe.variants), "vllm_version": VLLM_VERSIONS, "profile": sorted(recipe.profiles),
                "features": [sign + f for f in sorted(recipe.features) for sign in ("+", "-", "")],
                "load_format": LOAD_FORMATS, "model": MODELS}
        for base in _bases(catalog, slug):
            alone = {(d, v): _plan({**base, d: v}, {}, tmp)[1] for d, values in dims.items() for v in values}
            for a, b in PAIRS:
                for va in dims[a]:
                    for vb in dims[b]:
                        settings = {**base, a: va, b: vb}
                        refused = _plan(settings, {}, tmp)[1]
                        checked += 1
                        if (refused is None) == (alone[(a, va)] is None and alone[(b, vb)] is None):
                            continue
                        interactions += 1
                        charted = chart_refusal(helm, settings, tmp)
                        if (refused is None) != (charted is None):
                            disagreements += 1
                            print("DISAGREE", settings, "plan:", refused or "renders", "chart:",
                                  (charted or "renders")[-300:], flush=True)
        print(f"{slug}: {checked} pairs, {interactions} interactions asked of the chart, {disagreements} disagree "
              f"({time.time() - started:.0f} s)", flush=True)
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
