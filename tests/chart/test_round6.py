"""Issue 49 item 4: the chart's escape hatches judged as the API server would judge the pod, no
credential of a URL's query rendered, the hook given the monitoring values plan judges, and cpu
rendered as plan renders it."""

from __future__ import annotations

import pytest

from tests.chart.helm import chart_refusal, check_hook, hook_env, template

H200 = {"settings": {"hardware": "h200"}}


@pytest.mark.parametrize("extra, words", [
    ({"extraVolumes": [{"name": "cache", "emptyDir": {}}]}, "extraVolumes[0].name"),
    ({"extraVolumes": [{"name": "x", "emptyDir": {}}], "extraVolumeMounts": [{"name": "x", "mountPath": "/cache"}]},
     "extraVolumeMounts[0].mountPath"),
    ({"extraVolumes": [{"name": "x", "emptyDir": {}}], "extraVolumeMounts": [{"name": "x", "mountPath": "/dev/shm/"}]},
     "extraVolumeMounts[0].mountPath"),
    ({"extraVolumes": [{"name": "x", "emptyDir": {}}, {"name": "x", "emptyDir": {}}]}, "extraVolumes[1].name"),
    ({"extraVolumeMounts": [{"name": "nope", "mountPath": "/y"}]}, "names no volume"),
])
def test_extra_volumes_that_the_api_server_would_refuse_are_refused(helm, tmp_path, extra, words):
    why = chart_refusal(helm, {**H200, **extra}, tmp_path)
    assert why and words in why, why


def test_extra_volumes_of_their_own_render(helm, tmp_path):
    docs = template(helm, {**H200, "extraVolumes": [{"name": "x", "emptyDir": {}}],
                           "extraVolumeMounts": [{"name": "x", "mountPath": "/data"}]}, tmp_path)
    assert any(d.get("kind") == "Deployment" for d in docs)


def test_a_query_token_is_refused_by_the_schema(helm, tmp_path):
    values = {**H200, "autoscaling": {"enabled": True, "prometheusUrl": "http://prom:9090/?access_token=hf_Tok3n"}}
    why = chart_refusal(helm, values, tmp_path)
    assert why and "prometheusUrl" in why


def test_the_hook_judges_the_monitoring_values(helm, tmp_path):
    values = {"settings": {"hardware": "h200", "name": "kimi", "namespace": "kimi"},
              "monitoring": {"enabled": True, "scraper": {"namespace": "prom", "podLabels": {"app": "x" * 70}}}}
    env = hook_env(check_hook(template(helm, values, tmp_path)))
    assert env["KIMI_MONITORING"] == "true" and env["KIMI_SCRAPER_NAMESPACE"] == "prom"
    assert env["KIMI_SCRAPER_LABELS"] == "app=" + "x" * 70
    assert chart_refusal(helm, values, tmp_path)  # plan refuses the label; so does the hook


@pytest.mark.parametrize("settings", [{"skip_memory_check": True}, {"cpu_memory_gb": 2000, "cpu_ranks": 4},
                                      {"cpu_cores": 24, "cpu_ranks": 3, "cpu_memory_gb": 900},
                                      {"skip_memory_check": True, "strategy": "pd_cluster"}])
def test_cpu_renders_as_plan_renders_it(helm, tmp_path, settings):
    """The cpu target's pods (recipes/hardware.yaml pod_resources, no GPU) are the chart's as plan's."""
    from tests.deploy.shapes import documents

    values = {"settings": {"hardware": "cpu", "name": "kimi", "namespace": "kimi", **settings}}
    chart = {(d["kind"], d["metadata"]["name"]): d for d in template(helm, values, tmp_path, "-n", "kimi")}
    env = {"KIMI_HARDWARE": "cpu", "KIMI_NAME": "kimi", "KIMI_NAMESPACE": "kimi",
           **{f"KIMI_{k.upper()}": ("1" if v is True else str(v)) for k, v in settings.items()}}
    plan = {(d["kind"], d["metadata"]["name"]): d for d in documents("k8s", env) if d.get("kind") != "Namespace"}
    for key, obj in plan.items():
        if key[0] == "Deployment":
            assert _same(chart[key]["spec"]["template"]["spec"]) == _same(obj["spec"]["template"]["spec"]), key
        if key[0] == "LeaderWorkerSet":
            for part in ("leaderTemplate", "workerTemplate"):
                mine, theirs = (o["spec"]["leaderWorkerTemplate"].get(part, {}).get("spec") for o in (chart[key], obj))
                assert _same(mine) == _same(theirs), (key, part)


def _same(obj):
    """An object with each env list in name order (plan keeps the environment's order)."""
    if isinstance(obj, dict):
        return {k: sorted(map(_same, v), key=lambda e: e["name"]) if k == "env" else _same(v) for k, v in obj.items()}
    return [_same(x) for x in obj] if isinstance(obj, list) else obj


@pytest.mark.parametrize("extra, words", [
    ({"extraObjects": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                        "data": {"url": "http://prom/?access_token=abcdef"}}]}, "extraObjects[0] (kind ConfigMap)"),
    ({"extraObjects": ["apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  url: http://u:pw@h/\n"]},
     "extraObjects[0] (kind ConfigMap)"),
    ({"extraVolumes": [{"name": "n", "nfs": {"server": "h", "path": "/x?token=abcdef"}}]}, "extraVolumes[0]"),
])
def test_no_credential_renders_outside_a_secret_through_an_escape_hatch(helm, tmp_path, extra, words):
    why = chart_refusal(helm, {**H200, **extra}, tmp_path)
    assert why and words in why and "Secret" in why, why


def test_a_secret_among_the_extra_objects_may_hold_credentials(helm, tmp_path):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "y"}, "stringData": {"url": "http://u:pw@h/"}}
    docs = template(helm, {**H200, "extraObjects": [secret]}, tmp_path)
    assert any(d.get("kind") == "Secret" and d["metadata"]["name"] == "y" for d in docs)
