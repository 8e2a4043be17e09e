"""Azure ML endpoint and deployment YAML loaded by azure-ai-ml (its own schema validation)."""

from __future__ import annotations

import pytest

from tests.cloud.conftest import need, render


@pytest.fixture(scope="module")
def aml():
    return need("azure.ai.ml")


def loaded(aml, env, tmp_path):
    for name, text in render("azureml", env).items():
        (tmp_path / name).write_text(text)
    return (aml.load_online_endpoint(tmp_path / "azureml-endpoint.yml"),
            aml.load_online_deployment(tmp_path / "azureml-deployment.yml"))


@pytest.mark.slow
@pytest.mark.parametrize("hw,instance", [("h200", "Standard_ND96isr_H200_v5"), ("mi300x", "Standard_ND96isr_MI300X_v5")])
def test_deployment_loads_with_the_hardware_instance_routes_and_probes(aml, tmp_path, hw, instance):
    endpoint, deployment = loaded(aml, {"KIMI_HARDWARE": hw}, tmp_path)
    assert endpoint.name == deployment.endpoint_name
    assert deployment.instance_type == instance and deployment.instance_count == 1
    routes = deployment.environment.inference_config
    assert routes.readiness_route.path == "/health" and routes.scoring_route.path == "/v1/chat/completions"
    assert routes.liveness_route.port == 8000
    assert deployment.liveness_probe.initial_delay >= 3600
    assert deployment.environment_variables["KIMI_PLATFORM"] == "azureml"


def test_no_offering_is_a_clear_error(aml, tmp_path):
    from entrypoint.core.base.errors import KimiError

    with pytest.raises(KimiError, match="Standard_ND96isr_H200_v5"):
        loaded(aml, {"KIMI_HARDWARE": "b200"}, tmp_path)
