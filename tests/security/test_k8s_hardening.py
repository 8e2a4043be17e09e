"""What checkov does not judge about the hardened manifests (tests/security/test_checkov.py does
the rest): the namespace of every object and its Pod Security level, the NetworkPolicies'
selection of the pods LeaderWorkerSet and Deployments create, the pod security contexts as Pod
Security `restricted` defines them, the AMD device groups, and the checkov skips' syntax."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from entrypoint.core.base.errors import KimiError
from entrypoint.render import k8s
from tests.deploy.shapes import K8S, documents
from tests.security.scanner import ROOT

NAMESPACE = "llm-serving"
# Pod Security Standards, restricted (Kubernetes 1.33): the volume types a pod may use.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def _pods(docs):
    """(labels, pod spec) of every pod the objects create; LWS adds its own labels to each pod."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            template = doc["spec"]["template"]
            yield template["metadata"]["labels"], template["spec"]
        elif doc["kind"] == "LeaderWorkerSet":
            lwt = doc["spec"]["leaderWorkerTemplate"]
            for index in range(lwt["size"]):
                template = lwt.get("leaderTemplate", lwt["workerTemplate"]) if index == 0 else lwt["workerTemplate"]
                lws = {k8s.LWS_NAME_LABEL: doc["metadata"]["name"], k8s.LWS_INDEX_LABEL: str(index)}
                yield {**template["metadata"]["labels"], **lws}, template["spec"]


def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(K8S))
def test_every_object_is_in_the_namespace_which_enforces_restricted(case):
    docs = documents("k8s", {**K8S[case], "KIMI_NAMESPACE": NAMESPACE})
    ns = docs[0]
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"] == NAMESPACE
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert all(doc["metadata"]["namespace"] == NAMESPACE for doc in docs[1:])
    default = documents("k8s", K8S[case])
    assert {doc["metadata"].get("namespace") for doc in default[1:]} == {"kimi-serve"}


def test_a_bad_namespace_is_a_usage_error():
    with pytest.raises(KimiError, match="KIMI_NAMESPACE"):
        documents("k8s", {"KIMI_HARDWARE": "h200", "KIMI_NAMESPACE": "Kimi_Serve"})
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "KIMI_HARDWARE": "h200",
           "KIMI_NAMESPACE": "Kimi_Serve"}
    proc = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", "k8s"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "KIMI_NAMESPACE='Kimi_Serve'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("case", sorted(K8S))
def test_network_policies_admit_the_api_from_outside_and_anything_only_between_own_pods(case):
    docs = documents("k8s", K8S[case])
    # the API Service; a KV store's inner Services (master, headless store/instances) face its own pods only
    (svc,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-api")]
    policies = {d["metadata"]["name"].rsplit("-", 1)[1]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(policies) == {"api", "internal", "metrics"}  # metrics: tests/deploy/test_k8s_operating.py
    api, internal = policies["api"], policies["internal"]
    assert api["policyTypes"] == internal["policyTypes"] == ["Ingress"]  # egress: downloads, the registry
    port = svc["spec"]["ports"][0]["port"]
    assert api["ingress"] == [{"ports": [{"protocol": "TCP", "port": port}]}]
    (rule,) = internal["ingress"]
    assert set(rule) == {"from"}
    pods = list(_pods(docs))
    assert pods
    for labels, spec in pods:
        # the API policy selects exactly the pods the Service sends clients to
        assert _selects(api["podSelector"], labels) == all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
        assert _selects(internal["podSelector"], labels) and _selects(rule["from"][0]["podSelector"], labels)
        if _selects(api["podSelector"], labels):
            assert spec["containers"][0]["ports"] == [{"name": "http", "containerPort": port}]
    other = {"app.kubernetes.io/name": "someone-else", "app.kubernetes.io/part-of": "kimi-serve"}
    assert not _selects(rule["from"][0]["podSelector"], other)


@pytest.mark.parametrize("case", sorted(K8S))
def test_every_pod_meets_pod_security_restricted(case):
    for _, spec in _pods(documents("k8s", K8S[case])):
        pod = spec["securityContext"]
        assert spec["automountServiceAccountToken"] is False
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
        assert {next(k for k in v if k != "name") for v in spec["volumes"]} <= RESTRICTED_VOLUMES
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] >= 10000
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False and ctx["privileged"] is False
            assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["readOnlyRootFilesystem"] is True
            assert ctx.get("runAsUser", pod["runAsUser"]) >= 10000
            writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
            assert {"/tmp", "/home/kimi"} <= writable


@pytest.mark.parametrize("case", sorted(K8S))
def test_skip_annotations_are_checkov_syntax_with_a_reason(case):
    for doc in documents("k8s", K8S[case]):
        metas = [doc["metadata"]] + ([doc["spec"]["template"]["metadata"]] if doc["kind"] == "Deployment" else [])
        if doc["kind"] == "LeaderWorkerSet":
            lwt = doc["spec"]["leaderWorkerTemplate"]
            metas += [lwt[k]["metadata"] for k in ("leaderTemplate", "workerTemplate") if k in lwt]
        for meta in metas:
            for key, value in meta.get("annotations", {}).items():
                if key == "checksum/settings":  # the settings' sha256, which rolls the pods when they change
                    assert len(value) == 64 and set(value) <= set("0123456789abcdef")
                    continue
                assert key.startswith("checkov.io/skip")
                check, reason = value.split("=")  # checkov splits on '=': a second one would break it
                assert check.startswith("CKV_K8S_") and len(reason) > 20


def _recipes_with_digests(where, digests) -> str:
    recipes = where / "recipes"
    shutil.copytree(ROOT / "recipes", recipes, ignore=shutil.ignore_patterns(".validated"))
    serving = yaml.safe_load((recipes / "serving.yaml").read_text())
    serving["image"]["digests"] = digests
    (recipes / "serving.yaml").write_text(yaml.safe_dump(serving))
    return str(recipes)


def test_a_digest_locked_in_the_data_pins_the_published_image(tmp_path, monkeypatch):
    digest = "sha256:" + "0123456789abcdef" * 4
    monkeypatch.setenv("KIMI_RECIPES_DIR", _recipes_with_digests(tmp_path / "good", {"0.33.0-h200": digest, "0.34.0-rocm-gfx942": digest}))
    (dep,) = [d for d in documents("k8s", K8S["single-h200"]) if d["kind"] == "Deployment"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == f"ghcr.io/kimi-serve/kimi:0.33.0-h200@{digest}"
    assert "annotations" not in dep["metadata"]  # nothing left to skip
    (dep,) = [d for d in documents("k8s", K8S["single-mi300x-features"]) if d["kind"] == "Deployment"]
    assert "@" not in dep["spec"]["template"]["spec"]["containers"][0]["image"]  # no digest locked for it
    assert "CKV_K8S_43" in dep["metadata"]["annotations"]["checkov.io/skip1"]
    monkeypatch.setenv("KIMI_RECIPES_DIR", _recipes_with_digests(tmp_path / "bad", {"0.33.0-h200": "sha256:short"}))
    with pytest.raises(Exception, match="sha256:<64 hex digits>"):
        documents("k8s", K8S["single-h200"])
