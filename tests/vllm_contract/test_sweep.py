"""Every plan of a broad sweep (tests/vllm_contract/sweep.py) against the checked-in grammar of
every supported vLLM version (recipes/vllm/<version>.json, extracted from vLLM itself): each
vLLM process's argv parses (no unknown option, no bad choice, no missing value) and every VLLM_*
variable it sets is one that version's vllm.envs knows. The version requirements in the recipe
data agree with those grammars."""

from __future__ import annotations

import pytest

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError
from entrypoint.core.compose.select import version_key
from entrypoint.core.data.recipe import load_catalog
from entrypoint.core.vllm.args import tag
from entrypoint.core.vllm.vllm_cli import available_versions, load_spec, parse

from tests.vllm_contract.sweep import configurations

VERSIONS = available_versions()
CONFIGS = list(configurations())


def _too_old(version, minimum):
    return minimum is not None and version_key(version) < version_key(minimum)


# Variables a recipe sets that no vLLM release's vllm.envs has: Kimi-K3's AMD switch for AITER's
# a8w4 MoE path, read by the K3-enabled ROCm builds the recipe is written for (docs/composition.md).
UNKNOWN_TO_VLLM = {"VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4"}
# Recipe args a supported vLLM's grammar refuses (kimi-family: K2-Instruct's multi_node_tp_pp
# override; the flag is in vLLM 0.33.0's grammar, not in 0.19.1's or 0.32.0's): the launch is refused
# with exit 2 before anything starts.
REFUSED_ARGS = {"kimi-k2-instruct": "--disable-log-requests"}


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_every_plan_parses_with_the_versions_grammar(version):
    spec, catalog = load_spec(version), load_catalog()
    checked = refused = 0
    counts = {"floor": 0, "pools": 0, "grammar": 0}
    for cid, settings in CONFIGS:
        slug = settings["KIMI_RECIPE"]
        recipe = catalog.recipes[slug]
        profile = recipe.profiles.get(settings.get("KIMI_PROFILE", ""))
        try:
            launch = build({**settings, "KIMI_VLLM_VERSION": version})
        except KimiError as err:
            if _too_old(version, recipe.model.min_vllm_version):
                assert f"recipe needs vLLM >= {recipe.model.min_vllm_version}" in err.message, cid
                counts["floor"] += 1
            elif version in recipe.model.refused_vllm_versions:  # a release the recipe says to avoid
                assert f"recipe refuses vLLM {version}" in err.message, cid
                counts["floor"] += 1
            elif profile is not None and _too_old(version, profile.min_vllm):
                assert f"needs vLLM >= {profile.min_vllm}" in err.message
                refused += 1
            elif settings["KIMI_STRATEGY"] == "pd_cluster" and err.code == "unsupported_combination":
                assert "pool" in err.message, f"{cid}: {err.message}"  # the data's own pool rules
                counts["pools"] += 1
            elif "does not divide --tensor-parallel-size" in err.message:  # vLLM's DCP rule (K2-Instruct tp_pp)
                assert settings["KIMI_HARDWARE"] in ("gb200", "gb300") and slug == "kimi-k2-instruct", cid
                counts["dcp"] = counts.get("dcp", 0) + 1
            else:
                flag = REFUSED_ARGS.get(slug)
                assert flag and flag in err.message and flag not in spec.options, f"{cid}: {err.message}"
                counts["grammar"] += 1
            continue
        assert not _too_old(version, recipe.model.min_vllm_version), f"{cid} built below the recipe's floor"
        assert version not in recipe.model.refused_vllm_versions, f"{cid} built on a release the recipe refuses"
        for proc in launch.plan.processes:
            if proc.argv[:2] != ("vllm", "serve"):
                continue
            try:
                parse(tag("plan", proc.argv[3:]), spec)
            except KimiError as err:
                pytest.fail(f"{cid} ({proc.role} {proc.rank}) on vLLM {version}: {err.message}")
            unknown = sorted(k for k in proc.env if k.startswith("VLLM_") and k not in spec.env
                             and k not in UNKNOWN_TO_VLLM)
            assert not unknown, f"{cid} ({proc.role}) sets {unknown}, which vLLM {version} does not know"
            checked += 1
    flydsl = catalog.recipes["kimi-k2.5"].profiles["flydsl"].min_vllm
    assert checked > 1500 and refused == (len([c for c, s in CONFIGS if s.get("KIMI_PROFILE") == "flydsl"])
                                          if _too_old(version, flydsl) else 0)
    below = [s for _, s in CONFIGS if _too_old(version, catalog.recipes[s["KIMI_RECIPE"]].model.min_vllm_version)
             or version in catalog.recipes[s["KIMI_RECIPE"]].model.refused_vllm_versions]
    assert counts["floor"] == len(below)
    if not _too_old(version, catalog.recipes["kimi-k3"].model.min_vllm_version):
        assert counts["pools"] > 0  # Kimi-K3's prefill tp 8 refuses TP/TEP pools of other sizes
    assert (counts["grammar"] > 0) == (REFUSED_ARGS["kimi-k2-instruct"] not in spec.options)


def test_min_vllm_of_the_recipe_data_agrees_with_vllms_grammars():
    """A profile/feature with min_vllm has args some older grammar refuses and every grammar
    from min_vllm on accepts; one without it has args every supported grammar accepts."""
    recipe = load_catalog().recipe
    items = [(f"profile {k}", v) for k, v in recipe.profiles.items()] + \
            [(f"feature {k}", v) for k, v in recipe.features.items()]
    for what, item in items:
        for version in VERSIONS:
            spec = load_spec(version)
            try:
                parse(tag(what, list(item.args)), spec)
                accepted = True
            except KimiError:
                accepted = False
            assert accepted == (not _too_old(version, item.min_vllm)), f"{what} on vLLM {version}"
    assert any(_too_old(v, recipe.profiles["flydsl"].min_vllm) for v in VERSIONS)


def test_removed_env_matches_vllms_env_names():
    removed = load_catalog().vllm_env_removed
    assert removed
    for name, rule in removed.items():
        for version in VERSIONS:
            known = name in load_spec(version).env
            assert known == _too_old(version, rule.removed_in), f"{name} on vLLM {version}"
        for version in VERSIONS:
            parse(tag("replacement", list(rule.replacement_args)), load_spec(version))
