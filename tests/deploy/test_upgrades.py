"""Upgrades you can trust (issue 30, docs/day2.md): KIMI_IMAGE_DIGEST pins the image of every
rendering to one build, by content."""

from __future__ import annotations

import re

import pytest

from entrypoint.core.base.errors import KimiError
from tests.deploy.shapes import render

DIGEST = "sha256:" + "5e" * 32
FORMATS = {"compose": {"KIMI_HARDWARE": "h200"}, "k8s": {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster"},
           "k8s-bench": {"KIMI_HARDWARE": "h200"}, "compose-bench": {"KIMI_HARDWARE": "h200"},
           "sagemaker": {"KIMI_HARDWARE": "h200"}, "vertex": {"KIMI_HARDWARE": "h200"},
           "azureml": {"KIMI_HARDWARE": "h200"}, "skypilot": {"KIMI_HARDWARE": "h200"}}
# The published repository of recipes/serving.yaml, written out here.
PUBLISHED = "ghcr.io/kimi-serve/kimi"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_rendering_runs_the_pinned_build(fmt):
    text = "".join(render(fmt, {**FORMATS[fmt], "KIMI_IMAGE_DIGEST": DIGEST}).values())
    refs = set(re.findall(re.escape(PUBLISHED) + r"[^\s\"',]*", text))
    assert refs == {f"{PUBLISHED}:0.33.0-h200@{DIGEST}"}, refs
    assert "KIMI_IMAGE_DIGEST" not in text  # the renderer's setting: no container needs it


def test_a_users_image_is_pinned_too_and_two_digests_are_refused():
    text = "".join(render("compose", {"KIMI_HARDWARE": "h200", "KIMI_IMAGE": "registry.example/kimi:v3",
                                      "KIMI_IMAGE_DIGEST": DIGEST}).values())
    assert f"image: registry.example/kimi:v3@{DIGEST}" in text
    other = "sha256:" + "0" * 64
    with pytest.raises(KimiError, match="keep one of them"):
        render("k8s", {"KIMI_HARDWARE": "h200", "KIMI_IMAGE": f"registry.example/kimi@{other}",
                       "KIMI_IMAGE_DIGEST": DIGEST})


@pytest.mark.parametrize("env", [{"KIMI_HARDWARE": "h200"}, {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster"}])
def test_the_rollout_gate_is_a_verify_job_against_the_service(env):
    import yaml

    from tests.deploy.k8s_schema import _roundtrip

    text = "".join(render("k8s-verify", {**env, "KIMI_IMAGE_DIGEST": DIGEST}).values())
    (job,) = [d for d in yaml.safe_load_all(text) if d]
    _roundtrip(job, "V1Job")  # strict: a key the Kubernetes models do not know fails
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    port = 8000  # the API Service's port: vLLM's default, the router's KIMI_ROUTER_PORT default
    assert container["args"] == ["verify", "--url", f"http://kimi-k2-5-api.kimi-serve.svc:{port}"]
    assert container["image"] == f"{PUBLISHED}:0.33.0-h200@{DIGEST}"  # the build being rolled out
    assert job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"  # one verdict, no retry
    assert "rollout undo" in text  # the header says what a failure means
