"""checkov (the real scanner, tests/security/scanner.py) over the Dockerfile, the workflows and
every rendered Kubernetes shape: no failed check, and every skip carries its reason and is one
docs/security.md lists. checkov scans no LeaderWorkerSet (a custom resource), so the pod
templates of each LeaderWorkerSet are also scanned as the Pods LWS creates from them. A
deliberately unhardened copy of a rendered Deployment must fail: the scan is live.
(checkov has no Compose framework: tests/security/test_compose_hardening.py checks Compose.)"""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from tests.deploy.k8s_schema import validate
from tests.deploy.shapes import K8S, documents
from tests.security import scanner

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # installs checkov into its own venv once (~75 s), then ~15 s a scan

ROOT = scanner.ROOT
DIGEST = "registry.example/kimi-k2.5@sha256:" + "ab" * 32
SHAPES = {**K8S, "single-h200-digest": {"KIMI_HARDWARE": "h200", "KIMI_IMAGE": DIGEST},
          # monitoring and autoscaling on (PodMonitor, PrometheusRule, dashboard, ScaledObject/HPA, PDB, rollouts)
          "single-h200-operated": {"KIMI_HARDWARE": "h200", "KIMI_MONITORING": "1", "KIMI_AUTOSCALING": "keda",
                                   "KIMI_REPLICAS": "2"},
          "pd-h200-operated": {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_MONITORING": "1",
                               "KIMI_AUTOSCALING": "hpa"},
          # a fleet (docs/fleet.md): copies behind the router (its RBAC, its metrics), or behind a Gateway's picker
          "fleet-multi-h100x2-operated": {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2",
                                          "KIMI_REPLICAS": "2", "KIMI_MONITORING": "1"},
          "fleet-gateway-h200": {"KIMI_HARDWARE": "h200", "KIMI_REPLICAS": "2", "KIMI_ROUTER": "gateway"},
          # PD units: each pool a group per unit, the PD router discovering them (its RBAC, its metrics)
          "fleet-pd-h200-operated": {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "2",
                                     "KIMI_MONITORING": "1", "KIMI_AUTOSCALING": "keda"}}
# What the Helm chart renders (charts/kimi-serve, the real helm), scanned as it comes out of `helm template`
CHART = {"chart-single-h200": {"settings": {"hardware": "h200"}},
         "chart-multi-h100x2-operated": {"settings": {"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2},
                                         "monitoring": {"enabled": True}, "autoscaling": {"enabled": True}},
         "chart-pd-mi355x-2x2": {"settings": {"hardware": "mi355x", "strategy": "pd_cluster", "prefill_nodes": 2,
                                              "decode_nodes": 2}},
         # a KV store (master, store, instances as StatefulSets, router) and LMCache's sidecar
         "chart-kv-centralized-h200": {"settings": {"hardware": "h200", "kv_offload": "kv_store_centralized_mooncake"},
                                       "monitoring": {"enabled": True}},
         "chart-kv-lmcache-h200": {"settings": {"hardware": "h200", "kv_offload": "lmcache"}},
         "chart-kv-distributed-pd-b200": {"settings": {"hardware": "b200", "strategy": "pd_cluster",
                                                       "kv_offload": "kv_store_distributed_mooncake"}}}
CONTROL = "control-unhardened"
# The controls of the Pod Security Standards' restricted profile, and the rest the issue asks for:
# each must have passed on every GPU pod checkov scanned.
POD_CONTROLS = {
    "CKV_K8S_20": "no privilege escalation", "CKV_K8S_22": "read-only root filesystem",
    "CKV_K8S_23": "not root", "CKV_K8S_28": "no NET_RAW", "CKV_K8S_37": "all capabilities dropped",
    "CKV_K8S_31": "seccomp RuntimeDefault", "CKV_K8S_40": "high UID", "CKV_K8S_38": "no service-account token",
    "CKV_K8S_35": "secrets as files", "CKV_K8S_10": "CPU requests", "CKV_K8S_11": "CPU limits",
    "CKV_K8S_12": "memory requests", "CKV_K8S_13": "memory limits", "CKV_K8S_21": "not the default namespace",
    "CKV_K8S_15": "image pulled always", "CKV2_K8S_6": "a NetworkPolicy selects it",
}


def _pods_of(doc: dict):
    """The Pods a LeaderWorkerSet creates from its templates (what checkov would see live)."""
    lwt = doc["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key in lwt:
            meta = {**copy.deepcopy(lwt[key]["metadata"]), "name": f"{doc['metadata']['name']}-{key[:-8]}",
                    "namespace": doc["metadata"]["namespace"]}
            yield {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(lwt[key]["spec"])}


def _unhardened(docs: list) -> list:
    docs = copy.deepcopy(docs)
    for doc in docs:
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            pod.pop("securityContext")
            pod["containers"][0].pop("securityContext")
            pod["automountServiceAccountToken"] = True
    return docs


@pytest.fixture(scope="module")
def checkov():
    return scanner.ensure()


@pytest.fixture(scope="module")
def k8s_reports(checkov, tmp_path_factory):
    from tests.chart.helm import install, template

    out = tmp_path_factory.mktemp("k8s-scan")
    rendered = {case: documents("k8s", environ) + documents("k8s-bench", environ)  # + the bench Job beside it
                for case, environ in SHAPES.items()}
    helm = install()
    # installed into a namespace of its own, as an operator does (`helm install -n`); the `helm test` Pod included
    rendered.update({case: template(helm, values, tmp_path_factory.mktemp(case), "--namespace", "kimi-serve")
                     for case, values in CHART.items()})
    for case, docs in rendered.items():
        pods = [pod for doc in docs if doc["kind"] == "LeaderWorkerSet" for pod in _pods_of(doc)]
        (out / f"{case}.yaml").write_text(yaml.safe_dump_all(docs + pods, sort_keys=False))
    control = _unhardened(documents("k8s", SHAPES["single-h200-digest"]))
    (out / f"{CONTROL}.yaml").write_text(yaml.safe_dump_all(control, sort_keys=False))
    return scanner.scan(checkov, "kubernetes", out)


def _documented_skips() -> set:
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("## Reasoned skips", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`(CKV2?_[A-Z0-9]+_\d+)`", section))


def _check_skips(skipped: list) -> set:
    for r in skipped:
        reason = (r["check_result"].get("suppress_comment") or "").strip()
        assert len(reason) > 20 and reason != "No comment provided", f"{r['check_id']} on {r['resource']}: {reason!r}"
    ids = {r["check_id"] for r in skipped}
    assert ids <= _documented_skips(), f"skips docs/security.md does not list: {ids - _documented_skips()}"
    return ids


def test_every_rendered_shape_passes_with_reasoned_skips_only(k8s_reports):
    failed = scanner.by_file(k8s_reports, "failed_checks")
    control = failed.pop(f"{CONTROL}.yaml", [])
    assert not failed, {f: sorted({(r["check_id"], r["resource"]) for r in rs}) for f, rs in failed.items()}
    passed = scanner.by_file(k8s_reports, "passed_checks")
    assert set(passed) == {f"{case}.yaml" for case in (*SHAPES, *CHART)} | {f"{CONTROL}.yaml"}
    _check_skips(scanner.results(k8s_reports, "skipped_checks"))
    # The control: the same Deployment without its security contexts fails exactly those checks.
    assert {"CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_31", "CKV_K8S_38",
            "CKV_K8S_40"} <= {r["check_id"] for r in control}


@pytest.mark.parametrize("case", sorted((*SHAPES, *CHART)))
def test_every_gpu_pod_passed_the_restricted_controls(k8s_reports, case):
    passed = scanner.by_file(k8s_reports, "passed_checks")[f"{case}.yaml"]
    skipped = scanner.by_file(k8s_reports, "skipped_checks").get(f"{case}.yaml", [])
    # (the Pods checkov derives from Deployments for its graph check get that check only)
    pods = {r["resource"] for r in passed if r["resource"].split(".")[0] in ("Deployment", "Pod")
            and r["check_id"] != "CKV2_K8S_6"}
    assert pods
    for pod in pods:
        seen = {r["check_id"] for r in passed + skipped if r["resource"] == pod}
        assert set(POD_CONTROLS) - {"CKV2_K8S_6"} <= seen, (pod, set(POD_CONTROLS) - seen)
    # The graph check runs on the Pods checkov derives: each one is selected by a NetworkPolicy.
    assert any(r["check_id"] == "CKV2_K8S_6" for r in passed)


def test_a_digest_pins_the_image_and_a_tag_is_a_reasoned_skip(k8s_reports):
    passed = scanner.by_file(k8s_reports, "passed_checks")
    skipped = scanner.by_file(k8s_reports, "skipped_checks")
    assert "CKV_K8S_43" in {r["check_id"] for r in passed["single-h200-digest.yaml"]}
    assert "CKV_K8S_43" not in {r["check_id"] for r in skipped.get("single-h200-digest.yaml", [])}
    assert "CKV_K8S_43" in {r["check_id"] for r in skipped["single-h200.yaml"]}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_hardened_objects_still_validate(case):
    for doc in documents("k8s", SHAPES[case]):
        validate(doc)


def test_dockerfile_passes(checkov):
    reports = scanner.scan(checkov, "dockerfile", ROOT / "images" / "Dockerfile")
    assert not scanner.results(reports, "failed_checks")
    passed = {r["check_id"] for r in scanner.results(reports, "passed_checks")}
    assert {"CKV_DOCKER_2", "CKV_DOCKER_3", "CKV_DOCKER_8"} <= passed  # HEALTHCHECK, a user, not root
    _check_skips(scanner.results(reports, "skipped_checks"))


def test_workflows_pass(checkov):
    reports = scanner.scan(checkov, "github_actions", ROOT / ".github" / "workflows")
    assert not scanner.results(reports, "failed_checks"), scanner.results(reports, "failed_checks")
    assert scanner.results(reports, "passed_checks")
    _check_skips(scanner.results(reports, "skipped_checks"))
