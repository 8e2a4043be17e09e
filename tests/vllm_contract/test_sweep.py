"""Every plan of a broad sweep (tests/vllm_contract/sweep.py) against the checked-in grammar of
every supported vLLM version (recipes/vllm/<version>.json, extracted from vLLM itself): each
vLLM process's argv parses (no unknown option, no bad choice, no missing value) and every VLLM_*
variable it sets is one that version's vllm.envs knows. The version requirements in the recipe
data agree with those grammars."""

from __future__ import annotations

import pytest

from entrypoint.app import build
from entrypoint.core.args import tag
from entrypoint.core.errors import KimiError
from entrypoint.core.recipe import load_catalog
from entrypoint.core.select import version_key
from entrypoint.core.vllm_cli import available_versions, load_spec, parse

from tests.vllm_contract.sweep import configurations

VERSIONS = available_versions()
CONFIGS = list(configurations())


def _too_old(version, minimum):
    return minimum is not None and version_key(version) < version_key(minimum)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_plan_parses_with_the_versions_grammar(version):
    spec, recipe = load_spec(version), load_catalog().recipe
    checked = refused = 0
    for cid, settings in CONFIGS:
        profile = recipe.profiles.get(settings.get("KIMI_PROFILE", ""))
        try:
            launch = build({**settings, "KIMI_VLLM_VERSION": version})
        except KimiError as err:
            assert profile is not None and _too_old(version, profile.min_vllm), f"{cid}: {err.message}"
            assert f"needs vLLM >= {profile.min_vllm}" in err.message
            refused += 1
            continue
        for proc in launch.plan.processes:
            if proc.argv[:2] != ("vllm", "serve"):
                continue
            try:
                parse(tag("plan", proc.argv[3:]), spec)
            except KimiError as err:
                pytest.fail(f"{cid} ({proc.role} {proc.rank}) on vLLM {version}: {err.message}")
            unknown = sorted(k for k in proc.env if k.startswith("VLLM_") and k not in spec.env)
            assert not unknown, f"{cid} ({proc.role}) sets {unknown}, which vLLM {version} does not know"
            checked += 1
    assert checked > 500 and refused == (len([c for c, s in CONFIGS if s.get("KIMI_PROFILE") == "flydsl"])
                                         if _too_old(version, recipe.profiles["flydsl"].min_vllm) else 0)


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
