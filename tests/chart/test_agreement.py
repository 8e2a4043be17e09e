"""The chart against plan over a random sample of settings, in every run (issue 29): for each
value set, `helm template --skip-tests` and `kimi-serve plan --format k8s` give the same objects
(up to what only Helm knows: tests/chart/helm.py `without_helm`), or both refuse. The sample
(tests/chart/sample.py) mixes every setting an operator writes, valid and not: strategies and
node counts, variants, features, profiles, vLLM versions, load formats and model forms, roles,
KV choices and pools, ports, names, extra vLLM arguments (secrets among them), cache
directories, monitoring, autoscalers and copies.

KIMI_CHART_SEED replays a run (the seed is in the failure message), KIMI_CHART_SAMPLE sizes it."""

from __future__ import annotations

import json
import os
import time

from entrypoint.core.errors import KimiError
from tests.chart.helm import CHART, RELEASE, RELEASE_NAMESPACE, run, without_helm
from tests.chart.sample import sample
from tests.deploy.shapes import documents

SIZE = int(os.environ.get("KIMI_CHART_SAMPLE", "120"))


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


def _chart(helm, values: dict, tmp_path):
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    done = run(helm, "template", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--skip-tests", "-f", str(path),
               check=False)
    if done.returncode != 0:
        return None, done.stderr.strip()
    import yaml

    return [without_helm(d) for d in yaml.safe_load_all(done.stdout) if d], None


def _keyed(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_chart_and_plan_agree_on_a_random_sample(helm, tmp_path):
    seed = int(os.environ.get("KIMI_CHART_SEED", "0")) or int(time.time())
    disagreements, refused, messages_alike = [], 0, 0
    for settings, operate in sample(seed, SIZE):
        planned, plan_error = _plan(settings, operate, tmp_path)
        charted, chart_error = _chart(helm, values_of(settings, operate), tmp_path)
        if plan_error is not None or chart_error is not None:
            if plan_error is None or chart_error is None:
                disagreements.append((settings, operate, f"plan: {plan_error or 'renders'}; chart: "
                                                         f"{(chart_error or 'renders')[-400:]}"))
                continue
            refused += 1
            messages_alike += plan_error in chart_error
            continue
        a, b = _keyed(planned), _keyed(charted)
        if a != b:
            where = sorted(set(a) ^ set(b)) or [k for k in a if a[k] != b[k]]
            disagreements.append((settings, operate, f"objects differ: {where[:4]}"))
    print(f"\nchart vs plan: seed {seed}, {SIZE} value sets, {SIZE - len(disagreements)} agree "
          f"({refused} refused by both, {messages_alike} of them with plan's own message)")
    assert not disagreements, f"seed {seed} (KIMI_CHART_SEED={seed}): {len(disagreements)} of {SIZE} disagree:\n" + \
        "\n".join(f"{s} {o}: {why}" for s, o, why in disagreements[:15])
    assert 0 < refused < SIZE  # the sample holds both kinds
