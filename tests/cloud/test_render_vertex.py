"""Vertex AI request bodies parsed by google-cloud-aiplatform's own types (strict: an unknown field
fails), machine and accelerator as Vertex names them."""

from __future__ import annotations

import pytest

from entrypoint.core.base.errors import KimiError
from tests.cloud.conftest import need, render


@pytest.fixture(scope="module")
def aip():
    return need("google.cloud.aiplatform_v1")


def parsed(aip, env):
    files = render("vertex", env)
    upload = aip.UploadModelRequest.from_json(files["vertex-model-upload.json"], ignore_unknown_fields=False)
    deploy = aip.DeployModelRequest.from_json(files["vertex-deploy-model.json"], ignore_unknown_fields=False)
    return upload, deploy


@pytest.mark.slow
@pytest.mark.parametrize("hw,accelerator", [("h100x2", None), ("h200", "NVIDIA_H200_141GB"), ("b200", "NVIDIA_B200")])
def test_specs_parse_with_the_hardware_accelerators(aip, hw, accelerator):
    if accelerator is None:
        with pytest.raises(KimiError, match="one instance"):
            parsed(aip, {"KIMI_HARDWARE": "h100", "KIMI_NODES": "2", "KIMI_HEAD_ADDR": "x", "KIMI_IFACE": "eth0"})
        return
    upload, deploy = parsed(aip, {"KIMI_HARDWARE": hw})
    machine = deploy.deployed_model.dedicated_resources.machine_spec
    assert machine.accelerator_type == aip.AcceleratorType[accelerator] and machine.accelerator_count == 8
    spec = upload.model.container_spec
    assert spec.ports[0].container_port == 8080 and spec.health_route == "/health"
    assert spec.shared_memory_size_mb >= 1024
    probe = spec.startup_probe
    assert probe.http_get.path == "/health" and probe.period_seconds * probe.failure_threshold >= 3600
    assert {e.name: e.value for e in spec.env}["KIMI_PLATFORM"] == "vertex"


def test_a_hardware_vertex_does_not_offer_lists_the_offers(aip):
    with pytest.raises(KimiError, match="a3-ultragpu-8g"):
        parsed(aip, {"KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4"})
