"""The Helm conventions of charts/kimi-serve (issue 29's table, as vLLM production-stack's and
NVIDIA nim-llm's charts have them), through the real helm 4: image, resources, serviceAccount,
ingress, podLabels, service.port, env from Secrets, the token's Secret, persistence, probes,
NOTES.txt, the `helm test` hook, the monitors' labels and interval, names and labels from the
release, the release's namespace; the values schema refusing typos inside Kubernetes' own types;
no secret in a rendered manifest; every object valid against Kubernetes 1.30 and the newest
(kubernetes-validate, strict) and the real CRDs; every scrape target reachable through the
NetworkPolicies."""

from __future__ import annotations

import json
import re

import pytest

from tests.chart.helm import CHART, HELM_LABELS, chart_refusal, run
from tests.deploy import netpol
from tests.deploy.shapes import yaml_documents
from tests.deploy.k8s_schema import validate

H200 = {"settings": {"hardware": "h200"}}


def _render(helm, values: dict, tmp_path, release: str = "kimi", *args: str) -> list:
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    out = run(helm, "template", release, str(CHART), "-n", "serving", "-f", str(path), *args).stdout
    return yaml_documents(out)


def _refused(helm, values: dict, tmp_path) -> str:
    refusal = chart_refusal(helm, values, tmp_path)
    assert refusal is not None, values
    return refusal


def _one(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in objects if o["kind"] == kind])
    return found[0]


def _pod(objects):
    return _one(objects, "Deployment")["spec"]["template"]


def test_names_labels_and_namespace_come_from_the_release(helm, tmp_path):
    alpha, beta = _render(helm, H200, tmp_path, "alpha"), _render(helm, H200, tmp_path, "beta")
    names = lambda objs: {(o["kind"], o["metadata"]["name"]) for o in objs}  # noqa: E731
    assert not names(alpha) & names(beta)  # two releases never collide
    assert {o["metadata"]["namespace"] for o in alpha} == {"serving"}  # the release's namespace
    assert not [o for o in alpha if o["kind"] == "Namespace"]  # the release's namespace exists before its hook runs
    for obj in alpha:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "alpha" and labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"].startswith("kimi-serve-") and "app.kubernetes.io/version" in labels
    deployment = _one(alpha, "Deployment", "alpha")
    assert not set(HELM_LABELS) & set(deployment["spec"]["selector"]["matchLabels"])  # selectors stay upgrade-safe
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == "alpha"
    named = _render(helm, {"settings": {"hardware": "h200", "name": "kimi-a", "namespace": "llm"}}, tmp_path, "alpha")
    assert {o["metadata"].get("namespace") for o in named} == {"llm"}
    assert _one(named, "Deployment")["metadata"]["name"] == "kimi-a"
    refusal = chart_refusal(helm, H200, tmp_path, release="kimi.bad")  # plan's judgment of KIMI_NAME (the hook)
    assert refusal is not None and "KIMI_NAME" in refusal, refusal


def test_upgrade_keeps_every_name_and_selector(helm, tmp_path):
    """What `helm upgrade` cannot change in place (names, selectors, claim templates) is the same for
    the same release whatever chart values change around it."""
    before = _render(helm, H200, tmp_path)
    after = _render(helm, {**H200, "podLabels": {"team": "llm"}, "podAnnotations": {"a": "b"},
                           "settings": {**H200["settings"], "image": "registry.example/kimi:v2"}}, tmp_path)

    def immutable(objs):
        return {(o["kind"], o["metadata"]["name"]): json.dumps((o.get("spec") or {}).get("selector"), sort_keys=True) for o in objs}

    assert immutable(before) == immutable(after)


def test_image_resources_service_account_and_pod_labels(helm, tmp_path):
    values = {"settings": {**H200["settings"], "image": "registry.example/kimi:v1"}, "image": {"pullPolicy": "IfNotPresent"},
              "resources": {"limits": {"cpu": "64", "memory": "900Gi"}, "requests": {"cpu": "64", "memory": "900Gi"}},
              "serviceAccount": {"create": True, "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/k"}},
              "podLabels": {"team": "llm"}}
    objects = _render(helm, values, tmp_path)
    pod = _pod(objects)
    server = pod["spec"]["containers"][0]
    assert server["image"] == "registry.example/kimi:v1" and server["imagePullPolicy"] == "IfNotPresent"
    assert pod["spec"]["initContainers"][0]["image"] == "registry.example/kimi:v1"
    assert server["resources"]["limits"] == {"cpu": "64", "memory": "900Gi", "nvidia.com/gpu": "8"}
    assert pod["spec"]["serviceAccountName"] == "kimi"
    sa = _one(objects, "ServiceAccount", "kimi")
    assert sa["metadata"]["annotations"] == values["serviceAccount"]["annotations"]
    assert pod["metadata"]["labels"]["team"] == "llm"
    digest = "sha256:" + "cd" * 32
    pinned = _pod(_render(helm, {"settings": {**H200["settings"], "image": "r.example/kimi:v1", "image_digest": digest}},
                          tmp_path))
    assert pinned["spec"]["containers"][0]["image"] == f"r.example/kimi:v1@{digest}"  # as plan pins it
    # one source: the image is the settings' (the hook judges it as plan does), no second spelling
    assert "repository" in _refused(helm, {**H200, "image": {"repository": "r.example/kimi", "tag": "v1"}}, tmp_path)
    assert "GPUs of a pod are the plan's" in _refused(helm, {**H200, "resources": {"limits": {"nvidia.com/gpu": "4"}}},
                                                      tmp_path)


def test_service_port_ingress_and_notes(helm, tmp_path):
    values = {**H200, "service": {"port": 80},
              "ingress": {"enabled": True, "className": "nginx", "hosts": [{"host": "kimi.example.com"}],
                          "tls": [{"secretName": "kimi-tls", "hosts": ["kimi.example.com"]}]}}
    objects = _render(helm, values, tmp_path)
    svc = _one(objects, "Service", "kimi-api")
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
    ingress = _one(objects, "Ingress", "kimi-api")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "kimi-api", "port": {"number": 80}} and ingress["spec"]["ingressClassName"] == "nginx"
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    done = run(helm, "install", "kimi", str(CHART), "-n", "serving", "-f", str(path), "--dry-run=client")
    notes = done.stdout[done.stdout.index("NOTES:"):]
    for what in ("port-forward svc/kimi-api 80:80", "kimi-hf-token", "helm test kimi", "kimi.example.com"):
        assert what in notes, notes


@pytest.mark.parametrize("more", [{"monitoring": {"enabled": True}, "replicas": 3},
                                  {"replicas": 2, "settings": {**H200["settings"], "router": "gateway"}},
                                  {"settings": {**H200["settings"], "namespace": "llm"}}])
def test_notes_name_what_plan_renders_and_its_bound_on_a_start(helm, tmp_path, more):
    """What NOTES.txt tells the user to watch and reach is what plan renders: the objects' names and the
    recipe's bound on a start in seconds (it once printed the table's map of probe figures); its commands
    work: no follow of every container's log (kubectl follows at most 5 streams), and where the pods live
    in another namespace than the release, `helm test`'s log is read there (helm reads the release's)."""
    from entrypoint.core.compose.loading import startup_bound_s
    from entrypoint.core.data.recipe import load_catalog, with_recipe

    values = {**H200, **more}
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    done = run(helm, "install", "kimi", str(CHART), "-n", "serving", "-f", str(path), "--dry-run=client")
    notes = done.stdout[done.stdout.index("NOTES:"):]
    catalog = load_catalog()
    bound = startup_bound_s(with_recipe(catalog, catalog.serving.default_recipe))
    assert f"up to {bound} s)" in notes and "map[" not in notes and "<no value>" not in notes, notes
    assert "logs -f -l" not in notes
    if "namespace" in values["settings"]:
        assert "--logs" not in notes and "kubectl -n llm logs kimi-verify" in notes, notes
    objects = _render(helm, values, tmp_path)
    named = {(o["kind"], o["metadata"]["name"]) for o in objects}
    told = re.findall(r"the (\w+) (kimi[\w-]*)", notes) + re.findall(r"svc/(kimi[\w-]*)", notes)
    for found in told:
        kind, name = found if isinstance(found, tuple) else ("Service", found)
        if kind in ("Secret",):
            continue
        assert (kind, name) in named or (kind == "router" and ("Deployment", name) in named), (found, sorted(named))


def test_settings_the_chart_has_no_shape_for_install_to_the_hooks_refusal(helm, tmp_path):
    """NOTES.txt renders at install before the hook runs: with settings the table has no entry for (an
    unknown KV choice) and monitoring on, it points at the check's refusal instead of failing the
    template (it read the scraper of a shape that was not drawn)."""
    path = tmp_path / "values.json"
    path.write_text(json.dumps({"settings": {"hardware": "h200", "kv_offload": "mooncake"}, "monitoring": {"enabled": True}}))
    done = run(helm, "install", "kimi", str(CHART), "-n", "serving", "-f", str(path), "--dry-run=client")
    assert "kubectl -n serving logs job/kimi-check" in done.stdout[done.stdout.index("NOTES:"):]


def test_an_operating_value_set_to_null_is_plans_default(helm, tmp_path):
    """`--set autoscaling.prometheusUrl=null` (Helm drops the key): the autoscaler asks plan's default
    Prometheus (KIMI_PROMETHEUS_URL unset, which the hook judges), never a placeholder left unfilled."""
    from entrypoint.core.compose.settings import KIMI_FIELDS

    default = next(f.default for f in KIMI_FIELDS if f.name == "prometheus_url")
    objects = _render(helm, {**H200, "replicas": None, "autoscaling": {"enabled": True, "prometheusUrl": None}}, tmp_path)
    scaler = _one(objects, "ScaledObject", "kimi")
    assert {t["metadata"]["serverAddress"] for t in scaler["spec"]["triggers"]} == {default}
    assert scaler["spec"]["minReplicaCount"] == 1 and not re.search(r"[$@]\{", json.dumps(scaler))


def test_the_ingress_waits_out_a_silent_stream(helm, tmp_path):
    """Issue 38: a Kimi-K3 tool call streams nothing for ~32 s; ingress-nginx cuts a connection idle
    for 60 s by default. The Ingress waits recipes/serving.yaml streams.idle_timeout_s (600 s); a
    user's annotation wins."""
    values = {**H200, "ingress": {"enabled": True, "className": "nginx"}}
    annotations = _one(_render(helm, values, tmp_path), "Ingress", "kimi-api")["metadata"]["annotations"]
    assert annotations == {"nginx.ingress.kubernetes.io/proxy-read-timeout": "600",
                           "nginx.ingress.kubernetes.io/proxy-send-timeout": "600"}
    values["ingress"]["annotations"] = {"nginx.ingress.kubernetes.io/proxy-read-timeout": "900", "team": "ml"}
    annotations = _one(_render(helm, values, tmp_path), "Ingress", "kimi-api")["metadata"]["annotations"]
    assert annotations == {"nginx.ingress.kubernetes.io/proxy-read-timeout": "900",
                           "nginx.ingress.kubernetes.io/proxy-send-timeout": "600", "team": "ml"}


def test_env_from_secrets_and_the_token_secret(helm, tmp_path):
    ref = {"secretKeyRef": {"name": "vllm", "key": "api-key"}}
    values = {**H200, "extraEnv": [{"name": "VLLM_API_KEY", "valueFrom": ref}, {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
              "envFrom": [{"secretRef": {"name": "more"}}], "hfToken": {"secretName": "hub", "key": "token"}}
    pod = _pod(_render(helm, values, tmp_path))
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["VLLM_API_KEY"] == {"name": "VLLM_API_KEY", "valueFrom": ref}
    assert pod["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "more"}}]
    token = next(v for v in pod["spec"]["volumes"] if "secret" in v)["secret"]
    assert token["secretName"] == "hub" and token["items"][0]["key"] == "token"
    why = _refused(helm, {**H200, "extraEnv": [{"name": "VLLM_API_KEY", "value": "sk-abc"}]}, tmp_path)
    assert "/extraEnv/0" in why and "sk-abc" not in why  # the schema: a secret-named variable takes valueFrom


def test_no_secret_reaches_a_rendered_manifest(helm, tmp_path):
    for extra in ("--api-key sk-live-abc", "--api_key=sk-live-abc", "--hf-token hf_live_abc", "--api-k sk-live-abc"):
        why = _refused(helm, {"settings": {"hardware": "h200", "extra_args": f"--max-num-seqs 8 {extra}"}}, tmp_path)
        assert "/settings/extra_args" in why  # the schema refuses a secret option in any spelling


@pytest.mark.parametrize("persistence, volume, claims", [
    ({}, {"persistentVolumeClaim": {"claimName": "kimi-cache"}}, ["ReadWriteOnce"]),
    ({"enabled": False}, {"emptyDir": {}}, []),
    ({"existingClaim": "weights"}, {"persistentVolumeClaim": {"claimName": "weights"}}, []),
    ({"accessMode": "ReadWriteMany"}, {"persistentVolumeClaim": {"claimName": "kimi-cache"}}, ["ReadWriteMany"]),
])
def test_persistence(helm, tmp_path, persistence, volume, claims):
    objects = _render(helm, {**H200, "persistence": persistence}, tmp_path)
    cache = next(v for v in _pod(objects)["spec"]["volumes"] if v["name"] == "cache")
    assert {k: v for k, v in cache.items() if k != "name"} == volume
    assert [c["spec"]["accessModes"][0] for c in objects if c["kind"] == "PersistentVolumeClaim"] == claims


def test_a_shared_claim_is_read_write_many_and_read_write_once_is_refused_there(helm, tmp_path):
    objects = _render(helm, {"settings": {"hardware": "h200", "router": "none"}, "replicas": 2}, tmp_path)
    assert _one(objects, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"]
    why = _refused(helm, {**H200, "autoscaling": {"enabled": True}, "persistence": {"accessMode": "ReadWriteOnce"}},
                   tmp_path)
    assert "never attaches" in why
    multi = _render(helm, {"settings": {"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2},
                           "persistence": {"enabled": False}}, tmp_path)
    lwt = _one(multi, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    assert "volumeClaimTemplates" not in lwt
    assert {"name": "cache", "emptyDir": {}} in lwt["workerTemplate"]["spec"]["volumes"]


def test_probes_are_configurable_over_the_plans(helm, tmp_path):
    server = _pod(_render(helm, {**H200, "probes": {"readiness": {"periodSeconds": 10}, "startup": {"failureThreshold": 300}}},
                          tmp_path))["spec"]["containers"][0]
    assert server["readinessProbe"]["periodSeconds"] == 10
    assert server["readinessProbe"]["exec"]["command"][:3] == ["kimi-serve", "healthcheck", "--ready"]
    assert server["startupProbe"]["failureThreshold"] == 300
    plain = _pod(_render(helm, H200, tmp_path))["spec"]["containers"][0]
    assert plain["readinessProbe"]["periodSeconds"] == 5  # recipes/serving.yaml stop.readiness_period_s
    # the server's port is in the probe: it composes no launch every 5 s (issue 40 review)
    assert plain["readinessProbe"]["exec"]["command"][-2:] == ["--port", str(plain["ports"][0]["containerPort"])]
    moved = _pod(_render(helm, {"settings": {"hardware": "h200", "port": 8123}}, tmp_path))["spec"]["containers"][0]
    assert moved["readinessProbe"]["exec"]["command"][-2:] == ["--port", "8123"]
    assert plain["livenessProbe"]["periodSeconds"] == 30 and plain["livenessProbe"]["httpGet"]["path"] == "/health"


def test_helm_test_runs_verify_against_the_release_service(helm, tmp_path):
    objects = _render(helm, {**H200, "service": {"port": 80}}, tmp_path)
    (pod,) = [o for o in objects if o["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    args = pod["spec"]["containers"][0]["args"]
    assert args[:3] == ["verify", "--url", "http://kimi-api.serving.svc:80"] and "--concurrency" in args
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["KIMI_HARDWARE"] == "h200"  # it checks what the deployment serves
    validate(pod)


def test_monitors_carry_the_prometheus_selector_labels_and_interval(helm, tmp_path):
    values = {**H200, "monitoring": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}, "interval": "30s"}}
    objects = _render(helm, values, tmp_path)
    monitor, rule = _one(objects, "PodMonitor"), _one(objects, "PrometheusRule")
    assert monitor["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["podMetricsEndpoints"][0]["interval"] == "30s"


@pytest.mark.parametrize("values, why", [
    ({**H200, "tolerations": [{"key": "gpu", "operater": "Exists"}]}, "operater"),
    ({**H200, "affinity": {"nodeAfinity": {}}}, "nodeAfinity"),
    ({**H200, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerm": []}}}},
     "nodeSelectorTerm"),
    ({**H200, "resources": {"limit": {"cpu": "1"}}}, "limit"),
    ({**H200, "extraEnv": [{"name": "A", "valueFrom": {"secretKeyRef": {"nam": "x", "key": "k"}}}]}, "nam"),
    ({**H200, "envFrom": [{"secretRefs": {"name": "x"}}]}, "secretRefs"),
    ({**H200, "persistence": {"accessMode": "ReadWriteAll"}}, "accessMode"),
    ({**H200, "serviceAccount": {"creat": True}}, "creat"),
    ({**H200, "ingress": {"enabled": True, "hosts": [{"hostname": "x"}]}}, "hostname"),
])
def test_the_schema_refuses_typos_inside_kubernetes_types(helm, tmp_path, values, why):
    assert why in _refused(helm, values, tmp_path)


CASES = {
    "single": H200,
    "fleet-gb200": {"settings": {"hardware": "gb200"}, "replicas": 2},  # arm64 only: every pod, the hook too, selects it
    "multi": {"settings": {"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2}},
    "tp_dp": {"settings": {"recipe": "kimi-k3", "hardware": "gb300", "strategy": "multi_node_tp_dp", "nodes": 4}},
    "pd": {"settings": {"hardware": "h200", "strategy": "pd_cluster", "prefill_nodes": 2, "decode_nodes": 1,
                        "prefill_parallelism": "tp"}},
    "kv": {"settings": {"hardware": "h200", "kv_offload": "kv_store_centralized_mooncake", "kv_instances": 3}},
    "kv-pd": {"settings": {"hardware": "b200", "strategy": "pd_cluster", "kv_offload": "kv_store_centralized_mooncake"}},
    "lmcache": {"settings": {"hardware": "h200", "kv_offload": "lmcache"}},
    # fleets (docs/fleet.md): the copies behind vllm-router (its RBAC, PodMonitor), or a Gateway's InferencePool
    "fleet-single": {"settings": {"hardware": "h200"}, "replicas": 3},
    "fleet-multi": {"settings": {"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2,
                                 "router_policy": "power_of_two"}, "replicas": 2},
    "fleet-gateway": {"settings": {"hardware": "h200", "router": "gateway"}, "replicas": 2},
    "fleet-gateway-multi": {"settings": {"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2,
                                         "router": "gateway"}, "replicas": 2},
    # a PD fleet: each pool's LeaderWorkerSet a group per unit (LWS_GROUP_INDEX), the PD router discovering them
    "fleet-pd": {"settings": {"hardware": "h200", "strategy": "pd_cluster", "prefill_nodes": 2, "decode_nodes": 1,
                              "prefill_parallelism": "tp"}, "replicas": 2},
}
EVERYTHING = {"monitoring": {"enabled": True}, "serviceAccount": {"create": True},
              "ingress": {"enabled": True, "hosts": [{"host": "kimi.example.com"}]},
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_validates_strictly_and_every_scrape_target_is_reachable(helm, tmp_path, case):
    import kubernetes_validate

    # a KV store scales with neither copies nor an autoscaler (docs/operate.md)
    scaled = {} if case in ("kv", "lmcache", "kv-pd") else {"autoscaling": {"enabled": True}}
    objects = _render(helm, {**CASES[case], **EVERYTHING, **scaled}, tmp_path)
    newest = kubernetes_validate.utils.latest_version()
    core = ("Namespace", "Deployment", "StatefulSet", "Service", "PersistentVolumeClaim", "NetworkPolicy", "ConfigMap",
            "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceAccount", "Ingress", "Pod", "Role", "RoleBinding",
            "Job")  # the hook: its nodeSelector, ordering annotations, Pod Security fields
    for obj in objects:
        if obj["kind"] in core:
            for version in ("1.30.0", newest):
                kubernetes_validate.validate(obj, version, strict=True)
        validate(obj)  # the real CRDs (LeaderWorkerSet, KEDA, prometheus-operator), and the client's models
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    targets = netpol.scrape_targets(objects)
    assert targets
    for pod, port in targets:
        assert netpol.allowed(policies, netpol.scraper(), pod, port), (pod.owner, port)
        # the API port is open to every client; every other one (a fleet router's metrics port too) only to the scraper
        assert not netpol.allowed(policies, netpol.scraper("elsewhere"), pod, port) or port == 8000


@pytest.mark.parametrize("settings", [{"hardware": "h200", "cache_dir": "/models/${port}"},
                                      {"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2, "cache_dir": "/m/@{worker}"}])
def test_a_value_that_reads_like_a_placeholder_renders_as_written(helm, tmp_path, settings):
    """The table's copies are filled with the chart's values (kimi.fill); a user's value that reads like one of
    their placeholders (`${port}`, `@{labels}`) renders as written, as plan renders it, and breaks nothing."""
    literal = ["${labels}", "@{requests}", "${env}", "@{worker}", "${token_key}"]
    values = {"settings": settings, "extraEnv": [{"name": f"V{i}", "value": v} for i, v in enumerate(literal)],
              "podAnnotations": {f"note{i}": v for i, v in enumerate(literal)}}
    objects = _render(helm, values, tmp_path)
    templates = [o["spec"]["template"] for o in objects if o["kind"] == "Deployment"] + [
        o["spec"]["leaderWorkerTemplate"][k] for o in objects if o["kind"] == "LeaderWorkerSet"
        for k in ("leaderTemplate", "workerTemplate")]
    assert len(templates) == (2 if "nodes" in settings else 1)
    for template in templates:
        (server,) = [c for c in template["spec"]["containers"] if c["name"] == "kimi-serve"]
        assert [e["value"] for e in server["env"] if e["name"].startswith("V")] == literal
        assert {k: v for k, v in template["metadata"]["annotations"].items() if k.startswith("note")} == \
            {f"note{i}": v for i, v in enumerate(literal)}
        (cache,) = [m for m in server["volumeMounts"] if m["name"] == "cache"]
        assert cache["mountPath"] == settings["cache_dir"]


def test_a_pd_cluster_behind_the_gateway_renders_objects_the_api_server_takes_and_the_hook_refuses(helm, tmp_path):
    """plan refuses a PD cluster behind the Gateway, and so does the chart's pre-install check; the objects the
    chart renders for it are whole (the table has no Gateway pool for a PD cluster, and an unfilled placeholder
    where a selector goes would fail the API server's validation before the hook could say why)."""
    values = {"settings": {"hardware": "h200", "strategy": "pd_cluster", "router": "gateway"}, "replicas": 2}
    objects = _render(helm, values, tmp_path)
    assert not re.search(r"[$@]\{", json.dumps(objects))
    for obj in objects:
        validate(obj)
    assert "KIMI_ROUTER=gateway" in _refused(helm, values, tmp_path)
