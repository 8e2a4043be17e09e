"""The chart's pre-install/pre-upgrade check installs on every cluster (issue 50 item 3), as far as
an install can be asserted without an API server (none can be started on these machines: item 4's
fallback): Helm runs a release's pre-install hooks before it creates any release object, by weight,
so the hook Job may use nothing the release creates (a Namespace, a ConfigMap, a ServiceAccount);
it lands on a node that can run its image (the target's architecture, images/targets.yaml), as do
the router and the KV helpers; and every value plan reads reaches it."""

from __future__ import annotations


import pytest
import yaml

from tests.chart.helm import ROOT, chart_refusal, check_hook, hook_config, hook_env, is_hook, run, template

TARGETS = yaml.safe_load((ROOT / "images" / "targets.yaml").read_text())["targets"]


def _arch(hardware: str) -> str:
    (platform,) = {t["platform"] for t in TARGETS.values() if hardware in t["serves"]}
    return platform.split("/")[1]


def _pods(doc: dict):
    spec = doc.get("spec") or {}
    if doc["kind"] == "Pod":
        yield spec
    for template_ in (spec.get("template"), (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate"),
                      (spec.get("leaderWorkerTemplate") or {}).get("workerTemplate")):
        if template_:
            yield template_["spec"]


@pytest.mark.parametrize("hardware", ["gb200", "gb300", "h200", "mi355x", "cpu"])
def test_every_pod_and_the_hook_land_on_the_images_architecture(helm, tmp_path, hardware):
    """A fleet (its router) on every architecture; the gb200/gb300 images are arm64 only."""
    extra = {"skip_memory_check": True} if hardware == "cpu" else {}
    docs = template(helm, {"settings": {"hardware": hardware, **extra}, "replicas": 2}, tmp_path)
    pods = [(d["kind"], p) for d in docs for p in _pods(d)]
    assert {k for k, _ in pods} >= {"Job", "Pod", "Deployment"}  # the hook, `helm test`, the engines and the router
    for kind, pod in pods:
        assert pod["nodeSelector"]["kubernetes.io/arch"] == _arch(hardware), (kind, pod.get("nodeSelector"))


def test_the_kv_helpers_land_on_the_images_architecture(helm, tmp_path):
    docs = template(helm, {"settings": {"hardware": "gb200", "kv_offload": "kv_store_centralized_mooncake"}}, tmp_path)
    helpers = [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") in ("master", "store")]
    assert {d["kind"] for d in helpers} >= {"Deployment", "StatefulSet"}
    for doc in helpers:
        for pod in _pods(doc):
            assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"}


@pytest.mark.parametrize("values", [
    {"settings": {"hardware": "gb200"}},
    {"settings": {"hardware": "h200", "namespace": "llm"}, "monitoring": {"enabled": True,
                                                                     "scraper": {"namespace": "prom", "podLabels": {"app": "prometheus"}}}},
    {"settings": {"hardware": "h200"}, "replicas": 2, "autoscaling": {"enabled": True}, "serviceAccount": {"create": True}},
])
def test_the_hook_runs_before_and_without_any_release_object(helm, tmp_path, values):
    """Helm creates the release's objects after its pre-install hooks: the check may mount, run as or read
    none of them. No Namespace renders (the release's namespace exists first: `helm install
    --create-namespace`); the pre-install hooks are the check, a Job that runs to completion, and the
    ConfigMap of the settings it reads, created before it (a lower weight; hook_config asserts it)."""
    docs = template(helm, values, tmp_path, "-n", "serving")
    assert "Namespace" not in {d["kind"] for d in docs}
    hooks = [d for d in docs if is_hook(d) and d["metadata"]["annotations"]["helm.sh/hook"] != "test"]
    job = check_hook(docs)
    assert hook_config(docs) == values["settings"]  # the settings untouched, as written
    (config,) = [d for d in hooks if d["kind"] == "ConfigMap"]
    assert sorted(hooks, key=lambda d: d["kind"]) == [config, job]
    notes = job["metadata"]["annotations"]
    assert notes["helm.sh/hook"] == "pre-install,pre-upgrade" and int(notes["helm.sh/hook-weight"]) < 0
    assert set(notes["helm.sh/hook-delete-policy"].split(",")) == {"before-hook-creation", "hook-succeeded"}
    assert job["metadata"]["namespace"] == values["settings"].get("namespace", "serving")
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False
    # nothing the release makes: scratch, and the settings' ConfigMap hook
    assert all(set(v) == {"name", "emptyDir"} or v.get("configMap") == {"name": config["metadata"]["name"]}
               for v in pod["volumes"]), pod["volumes"]
    (container,) = pod["containers"]
    assert "envFrom" not in container and all("valueFrom" not in e for e in container["env"])


def test_a_namespace_value_is_refused_with_the_way_out(helm, tmp_path):
    (tmp_path / "v.yaml").write_text("settings: {hardware: h200}\ncreateNamespace: true\n")
    done = run(helm, "template", "kimi", str(ROOT / "charts" / "kimi-serve"), "-f", str(tmp_path / "v.yaml"), check=False)
    assert done.returncode != 0 and "createNamespace" in done.stderr


def test_every_value_plan_reads_reaches_the_hook(helm, tmp_path):
    """The settings as written (its KIMI_CONFIG file) and every chart value under its KIMI_* name
    (facts.json chart_values)."""
    import json

    facts = json.loads((ROOT / "charts" / "kimi-serve" / "files" / "facts.json").read_text())
    values = {"settings": {"hardware": "h200", "features": "-spec_decoding", "drain_timeout": 60, "port": 8100},
              "replicas": 2,
              "autoscaling": {"enabled": True, "engine": "hpa", "maxReplicas": 5, "waitingPerReplica": 4,
                              "kvCachePercent": 70, "prometheusUrl": "http://prom.example:9090"},
              "monitoring": {"enabled": True, "sloTtftMs": 1500, "sloItlMs": 80,
                             "scraper": {"namespace": "prom", "podLabels": {"app": "prometheus"}}}}
    docs = template(helm, values, tmp_path)
    env = hook_env(check_hook(docs))
    assert hook_config(docs) == values["settings"]
    assert {f"KIMI_{k.upper()}" for k in facts["chart_values"]} <= set(env)
    assert {k: env[k] for k in ("KIMI_REPLICAS", "KIMI_AUTOSCALING", "KIMI_MAX_REPLICAS", "KIMI_MONITORING",
                                "KIMI_SCRAPER_NAMESPACE", "KIMI_SCRAPER_LABELS")} == {"KIMI_REPLICAS": "2",
        "KIMI_AUTOSCALING": "hpa", "KIMI_MAX_REPLICAS": "5", "KIMI_MONITORING": "true", "KIMI_SCRAPER_NAMESPACE": "prom",
        "KIMI_SCRAPER_LABELS": "app=prometheus"}


def test_the_chart_renders_as_an_umbrellas_dependency(helm, tmp_path):
    """Helm gives a dependency its umbrella's `global` values: the schema takes them (it refused them before),
    and two aliases of the chart render each its own hook, on its own architecture."""
    umbrella = tmp_path / "umbrella"
    (umbrella / "charts").mkdir(parents=True)
    (umbrella / "charts" / "kimi-serve").symlink_to(ROOT / "charts" / "kimi-serve")
    version = yaml.safe_load((ROOT / "charts" / "kimi-serve" / "Chart.yaml").read_text())["version"]
    (umbrella / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "umbrella", "version": "0.0.0",
        "dependencies": [{"name": "kimi-serve", "version": version, "alias": a} for a in ("arm", "x86")]}))
    (umbrella / "values.yaml").write_text(yaml.safe_dump({
        "global": {"team": "llm"}, "arm": {"settings": {"hardware": "gb200", "name": "arm"}},
        "x86": {"settings": {"hardware": "h200", "name": "x86"}}}))
    docs = [d for d in yaml.safe_load_all(run(helm, "template", "kimi", str(umbrella)).stdout) if d]
    hooks = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job" and is_hook(d)}
    assert {name: job["spec"]["template"]["spec"]["nodeSelector"] for name, job in hooks.items()} == {
        "arm-check": {"kubernetes.io/arch": "arm64"}, "x86-check": {"kubernetes.io/arch": "amd64"}}


@pytest.mark.parametrize("engine", ["keda", "hpa"])
def test_autoscaling_bounds_are_drawn_as_given_and_judged_by_plan(helm, tmp_path, engine):
    """maxReplicas below replicas: plan refuses (no max() of them in Python or Go), and so does the chart's check."""
    from entrypoint.core.base.errors import KimiError
    from tests.deploy.shapes import documents

    env = {"KIMI_HARDWARE": "h200", "KIMI_AUTOSCALING": engine, "KIMI_REPLICAS": "6", "KIMI_MAX_REPLICAS": "4"}
    with pytest.raises(KimiError) as refused:
        documents("k8s", env)
    assert "KIMI_MAX_REPLICAS=4 is below KIMI_REPLICAS=6" in refused.value.message
    values = {"settings": {"hardware": "h200"}, "replicas": 6,
              "autoscaling": {"enabled": True, "engine": engine, "maxReplicas": 4}}
    assert chart_refusal(helm, values, tmp_path) == refused.value.message
