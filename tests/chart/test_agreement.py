"""The chart against plan over a random sample of settings, in every run (issue 29): for each
value set, `helm template --skip-tests` and `kimi-serve plan --format k8s` give the same objects
(up to what only Helm knows: tests/chart/helm.py `without_helm`), or both refuse. The sample
(tests/chart/sample.py) mixes every setting an operator writes, valid and not: strategies and
node counts, variants, features, profiles, vLLM versions, load formats and model forms, roles,
KV choices and pools, ports, names, extra vLLM arguments (secrets among them), cache
directories, monitoring, autoscalers, and copies (fleets behind vllm-router, a Gateway or a plain
Service, router policies among them).

A second sample holds fleets only (sample.fleet_sample), half the size.

The sample is seeded (SEED: every run compares the same value sets); KIMI_CHART_SEED=N another
(the seed is in the failure message), KIMI_CHART_SAMPLE sizes it.
`python -m tests.chart.pairs` asks the chart every pair of settings whose plan verdict its
one-setting tables could get wrong (by hand: it takes half an hour)."""

from __future__ import annotations

import json
import os

import pytest

from entrypoint.core.base.errors import KimiError
from tests.chart.helm import RELEASE, RELEASE_NAMESPACE, hook_verdict, is_hook, template_many, without_helm
from tests.chart.sample import fleet_sample, sample
from tests.deploy.shapes import documents

SIZE = int(os.environ.get("KIMI_CHART_SAMPLE", "120"))
FLEET_SIZE = max(1, SIZE // 2)  # the fleets' sample: half as many


def _toml(settings: dict) -> str:
    def value(v):
        return ("true" if v else "false") if isinstance(v, bool) else str(v) if isinstance(v, int) else json.dumps(v)

    return "".join(f"{k} = {value(v)}\n" for k, v in settings.items())


def _plan(settings: dict, operate: dict, tmp_path):
    config = tmp_path / "kimi.toml"
    config.write_text(_toml({"name": RELEASE, "namespace": RELEASE_NAMESPACE, **settings}))
    env = {"KIMI_CONFIG": str(config)}
    if operate.get("monitoring"):
        env["KIMI_MONITORING"] = "1"
    if operate.get("autoscaling"):
        env["KIMI_AUTOSCALING"] = operate["autoscaling"]
    if operate.get("replicas"):
        env["KIMI_REPLICAS"] = str(operate["replicas"])
    try:
        return [d for d in documents("k8s", env) if d["kind"] != "Namespace"], None
    except KimiError as exc:
        return None, exc.message


def values_of(settings: dict, operate: dict) -> dict:
    values: dict = {"settings": settings}
    if operate.get("monitoring"):
        values["monitoring"] = {"enabled": True}
    if operate.get("autoscaling"):
        values["autoscaling"] = {"enabled": True, "engine": operate["autoscaling"]}
    if operate.get("replicas"):
        values["replicas"] = operate["replicas"]
    return values


def _charts(helm, value_sets: list, tmp_path) -> list:
    """Per value set, (objects, every document, the hooks among them) of `helm template --skip-tests`,
    or (None, helm's error)."""
    return [(None, docs) if isinstance(docs, str) else ([without_helm(d) for d in docs if not is_hook(d)], docs)
            for docs in template_many(helm, value_sets, tmp_path)]


def _component(obj) -> str:
    return obj["metadata"]["labels"].get("app.kubernetes.io/component", "")


def _keyed(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def _compare(helm, tmp_path, samples, seed, what: str):
    """The rendered fleets and PD fleets; asserts chart and plan agree."""
    disagreements, refused, messages_alike, fleets, pd_fleets, by_hook = [], 0, 0, 0, 0, 0
    charts = _charts(helm, [values_of(settings, operate) for settings, operate in samples], tmp_path)
    for (settings, operate), (charted, rendered) in zip(samples, charts):
        planned, plan_error = _plan(settings, operate, tmp_path)
        chart_error = rendered if charted is None else None
        if charted is not None:
            verdict = hook_verdict(rendered)  # the chart's pre-install check: plan's own judgment
            if verdict is not None:
                chart_error, by_hook = "the chart's pre-install check refuses: " + verdict, by_hook + 1
            elif plan_error is not None:
                chart_error = None
        if plan_error is not None or chart_error is not None:
            if plan_error is None or chart_error is None:
                disagreements.append((settings, operate, f"plan: {plan_error or 'renders'}; chart: "
                                                         f"{(chart_error or 'renders')[-400:]}"))
                continue
            refused += 1
            messages_alike += plan_error in chart_error
            continue
        a, b = _keyed(planned), _keyed(charted)
        fleet = any(o["kind"] in ("Role", "InferencePool") for o in planned)
        fleets += fleet
        pd_fleets += fleet and "prefill" in {_component(o) for o in planned}
        if a != b:
            where = sorted(set(a) ^ set(b)) or [k for k in a if a[k] != b[k]]
            disagreements.append((settings, operate, f"objects differ: {where[:4]}"))
    size = len(samples)
    print(f"\nchart vs plan ({what}): seed {seed}, {size} value sets, {size - len(disagreements)} agree "
          f"({refused} refused by both, {messages_alike} of them with plan's own message, {by_hook} by the chart's "
          f"pre-install check; {fleets} rendered fleets: "
          f"copies behind the router or a Gateway, {pd_fleets} of them PD fleets)")
    assert not disagreements, f"seed {seed} (KIMI_CHART_SEED={seed}): {len(disagreements)} of {size} disagree:\n" + \
        "\n".join(f"{s} {o}: {why}" for s, o, why in disagreements[:15])
    assert 0 < refused < size  # the sample holds both kinds
    return fleets, pd_fleets


SEED = 37  # the sample every run compares (deterministic); KIMI_CHART_SEED=N replays or widens it


def _seed() -> int:
    return int(os.environ.get("KIMI_CHART_SEED", "0")) or SEED


@pytest.mark.slow
def test_chart_and_plan_agree_on_a_random_sample(helm, tmp_path):
    seed = _seed()
    _compare(helm, tmp_path, sample(seed, SIZE), seed, "any settings")


@pytest.mark.slow
def test_chart_and_plan_agree_on_a_random_sample_of_fleets(helm, tmp_path):
    """Fleets (docs/fleet.md): copies of every strategy behind vllm-router, a Gateway or a plain
    Service, with router policies and ports, monitoring and autoscalers, and what plan refuses in a
    fleet (PD units behind a Gateway or no router, KV stores, kv_aware, power_of_two alone, token ids on vLLM
    0.19.1, host addresses); PD fleets (pools sized and parallelised at times, autoscaled units)."""
    seed = _seed()
    fleets, pd_fleets = _compare(helm, tmp_path, fleet_sample(seed, FLEET_SIZE), seed, "fleets")
    assert fleets > pd_fleets > 0  # the sample renders fleets and PD fleets, not only refusals


# issue 50's drift cases: an autoscaler with a load format other than the recipe's (the start-up budget,
# its probe, progress deadline and scale-down window), every format vLLM registers; a GB200 fleet; monitoring
DRIFT = [({"hardware": "h200", "load_format": fmt}, {"autoscaling": engine})
         for fmt, engine in (("tensorizer", "keda"), ("dummy", "keda"), ("hf", "hpa"), ("pt", "keda"),
                             ("gguf", "keda"), ("auto", "hpa"), ("runai_streamer", "keda"), ("no_such_format", "keda"))] + [
    ({"hardware": "h200", "load_format": "safetensors", "model": "/models/kimi"}, {"autoscaling": "keda", "replicas": 2}),
    ({"hardware": "h100", "strategy": "multi_node_tp", "nodes": 3, "load_format": "dummy"}, {"autoscaling": "keda"}),
    ({"hardware": "gb200"}, {"replicas": 2, "monitoring": True}),
    ({"hardware": "cpu", "skip_memory_check": True, "load_format": "dummy"}, {"autoscaling": "keda"}),
]


@pytest.mark.slow
def test_the_drift_cases_agree(helm, tmp_path):
    _compare(helm, tmp_path, DRIFT, 0, "issue 50's drift cases")


def test_the_pairs_script_asks_the_chart_as_this_module_does(helm, tmp_path):
    """tests/chart/pairs.py (run by hand) asks the chart through this module's own helpers: it renders a
    valid value set and gets the pre-install check's refusal, in plan's words, of an invalid one."""
    from tests.chart.pairs import chart_refusal

    assert chart_refusal(helm, {"hardware": "h200"}, tmp_path) is None
    refusal = chart_refusal(helm, {"hardware": "h200", "router": "gateway", "stream_front": "on"}, tmp_path)
    assert refusal is not None and "KIMI_STREAM_FRONT=on" in refusal, refusal
