"""Every configuration of every recipe's golden (tests/data/golden/<slug>.json) resolves to exactly
its expected processes; the cases the golden marks `excluded` are never launched as the site
renders them."""


import pytest

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError
from entrypoint.core.data.recipe import load_catalog
from entrypoint.core.vllm.vllm_cli import load_spec, newest_version

from golden_data import (RECIPE_GOLDENS, excluded_cases, family_cases, golden_cases, plan_batch, refused_cases,
                         without_drain)

CASES = golden_cases()
# The site renders the recipe for its vLLM floor (model.min_vllm_version): on newer vLLM the plan
# drops the VLLM_* variables that release no longer knows (test_family_golden_on_the_newest_vllm).
FLOOR = {"KIMI_VLLM_VERSION": load_catalog().recipe.model.min_vllm_version}  # the one floor: the recipe's
FAMILY = family_cases()
EXCLUDED = excluded_cases()
REFUSED = refused_cases()
# Kimi-K3's AMD switch of AITER's a8w4 MoE path: unknown to vLLM 0.33.0's vllm.envs, kept on purpose
# (the K3-enabled ROCm builds read it; docs/composition.md).
KEPT_UNKNOWN = {"VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_golden_case(case, catalog):
    try:
        got = without_drain(build({**case["settings"], **FLOOR}, catalog=catalog).plan.as_dict())
    except KimiError as err:
        got = {"error": err.code}
    assert {k: v for k, v in got.items() if k != "recipe"} == case["expect"]
    if "processes" in got:  # env order is part of what the site renders
        for mine, theirs in zip(got["processes"], case["expect"]["processes"]):
            assert list(mine["env"]) == list(theirs["env"])


def _newest_expectation(expect: dict, known) -> dict:
    """The site's launch less the VLLM_* variables the newest vLLM does not know: vLLM's own list
    (its grammar file, written from vLLM by `build.py vllm-spec`), not the removal list the code
    applies."""
    if "error" in expect:
        return expect
    return {"processes": [{**p, "env": {k: v for k, v in p["env"].items()
                                        if not k.startswith("VLLM_") or k in known or k in KEPT_UNKNOWN}}
                          for p in expect["processes"]]}


def _only_listed_ranks(case, got: dict) -> dict:
    """A golden named `-r0` lists rank 0 of each pool only (the site's API renders one rank): the
    other ranks of a pool that spans several nodes must be that pool's headless workers."""
    if "error" in got or not case["id"].split("/")[3].endswith("-r0"):
        return got
    want = {(p["role"], p["rank"]) for p in case["expect"]["processes"]}
    extra = [p for p in got["processes"] if (p["role"], p["rank"]) not in want]
    for proc in extra:
        assert proc["role"] in ("prefill", "decode") and proc["rank"] > 0 and "--headless" in proc["argv"], proc
    return {**got, "processes": [p for p in got["processes"] if (p["role"], p["rank"]) in want]}


@pytest.mark.parametrize("slug, case", FAMILY, ids=[f"{s}:{c['id']}" for s, c in FAMILY])
def test_family_golden_on_the_newest_vllm(slug, case, catalog):
    """Each recipe's golden on the vLLM the images carry (the newest): the same argv and env, less
    what that vLLM removed, in the same order."""
    settings = {**case["settings"], "KIMI_VLLM_VERSION": newest_version()}
    assert settings.get("KIMI_RECIPE", "kimi-k2.5") == slug
    try:
        got = without_drain(build(settings, catalog=catalog).plan.as_dict())
    except KimiError as err:
        got = {"error": err.code}
    want = _newest_expectation(case["expect"], load_spec(newest_version()).env)
    got = _only_listed_ranks(case, got)
    assert {k: v for k, v in got.items() if k != "recipe"} == want
    if "processes" in got:
        assert got["recipe"] == slug
        for mine, theirs in zip(got["processes"], want["processes"]):
            assert list(mine["env"]) == list(theirs["env"])


# Excluded kinds the project renders, corrected, rather than refuses (docs/composition.md)
CORRECTED = {"hw-baseline-dropped", "tp-dp-lb-mismatch"}


@pytest.mark.parametrize("slug, case", EXCLUDED, ids=[f"{s}:{c['id']}" for s, c in EXCLUDED])
def test_excluded_renderings_are_refused_or_corrected(slug, case, catalog):
    """The site's renderings that contradict the recipe's own data or vLLM's rules
    (docs/composition.md): the project refuses them with a message, or (hw-baseline-dropped alone)
    keeps the recipe's hardware baseline the site drops."""
    kinds = {part.split(":")[0].strip() for part in case["excluded"].split("|")}
    try:
        launch = build(case["settings"], catalog=catalog)
        plan = without_drain(launch.plan.as_dict())
    except KimiError as err:
        assert err.code == "unsupported_combination", err
        assert kinds - CORRECTED, f"{case['id']}: only kinds the project corrects"
        return
    assert kinds <= CORRECTED, f"{case['id']} rendered although {kinds}"
    upstream = {(p["role"], p["rank"]): p for p in case["upstream"]["processes"]}
    if kinds == {"tp-dp-lb-mismatch"}:  # the site's launch, with every worker headless
        assert [p["argv"].count("--headless") for p in plan["processes"]] == [int(p["rank"] > 0) for p in plan["processes"]]
        # on the vLLM the plan is for (serving.yaml's default_vllm when unset), less the VLLM_* variables it does not know
        release = launch.selection.vllm_version
        assert [{**p, "argv": [a for a in p["argv"] if a != "--headless"]} for p in plan["processes"]] == \
            _newest_expectation(case["upstream"], load_spec(release).env)["processes"]
        return
    for proc in plan["processes"]:
        theirs = upstream.get((proc["role"], proc["rank"]))
        if theirs is None:  # an `-r0` golden: rank 0 of each pool only
            continue
        if proc["role"] == "router":
            assert proc["argv"] == theirs["argv"]
            continue
        assert proc["argv"] != theirs["argv"]  # the baseline is back: not the site's rendering
        baseline = [a for a in proc["argv"] if a not in theirs["argv"]]
        assert "--load-format" in baseline and "--kv-cache-dtype" in baseline, baseline
        assert set(theirs["env"]) < set(proc["env"]) and "UCX_TLS" in proc["env"]


@pytest.mark.parametrize("slug, release, case", REFUSED, ids=[f"{s}@{r}:{c['id']}" for s, r, c in REFUSED])
def test_a_refused_release_is_refused_in_every_configuration(slug, release, case, catalog):
    """The releases a golden says the recipe must refuse (its top-level `refused_vllm_versions`):
    every configuration of it at that release is `unsupported_combination`, whose message names the
    release, the recipe's reason and the releases that work."""
    with pytest.raises(KimiError) as info:
        build({**case["settings"], "KIMI_VLLM_VERSION": release}, catalog=catalog)
    assert info.value.code == "unsupported_combination"
    assert f"KIMI_VLLM_VERSION={release}" in info.value.message and "regression" in info.value.message
    assert f"not {release}" in info.value.message and newest_version() in info.value.message


def test_every_recipe_has_its_golden():
    from entrypoint.core.data.recipe import load_catalog

    recipes = load_catalog().recipes  # a provisional recipe has no recipe page, so no golden (kimi-k3.1-pro)
    assert sorted(s for s, r in recipes.items() if not r.provisional) == sorted(RECIPE_GOLDENS)
    assert [s for s, r in recipes.items() if r.provisional] == ["kimi-k3.1-pro"]
    sizes = {"kimi-k2-instruct": 72, "kimi-k2-thinking": 104, "kimi-k2.5": 112, "kimi-k2.6": 104, "kimi-k2.7-code": 72,
             "kimi-k3": 76, "kimi-linear-48b-a3b-instruct": 45}  # each file's own count (tests/data/PROVENANCE.md)
    assert {slug: len(golden_cases(slug)) for slug in RECIPE_GOLDENS} == sizes
    assert [(s, r) for s, r, _ in REFUSED][:1] == [("kimi-linear-48b-a3b-instruct", "0.12.0")] and len(REFUSED) == 45
    kinds = {part.split(":")[0].strip() for _, c in EXCLUDED for part in c["excluded"].split("|")}
    assert kinds == {"hw-baseline-dropped", "pool-tp-ignored", "pool-mode-unsupported", "dcp-not-dividing-tp",
                     "tp-dp-lb-mismatch"}


@pytest.mark.slow
def test_golden_through_the_batch_cli(tmp_path):
    """`plan --batch` renders every golden case of every recipe in one process, one JSON line each,
    errors included."""
    cases = [c for _, c in FAMILY] + [{**c, "settings": {**c["settings"], "KIMI_VLLM_VERSION": r},
                                        "expect": {"error": "unsupported_combination"}} for _, r, c in REFUSED]
    for case, result in zip(cases, plan_batch(tmp_path, cases)):
        if "error" in case["expect"]:
            assert result["error"]["code"] == case["expect"]["error"]
            assert result["error"]["message"]
        else:
            assert [(p["role"], p["rank"]) for p in result["processes"]][:1] == \
                [(p["role"], p["rank"]) for p in case["expect"]["processes"]][:1], case["id"]


def test_golden_file_is_in_the_repository():
    assert len(CASES) >= 100
