"""SageMaker request bodies, validated by botocore's SageMaker service model (ParamValidator)
and accepted by moto's SageMaker mock (CreateModel, CreateEndpointConfig, CreateEndpoint)."""

from __future__ import annotations

import json

import pytest

from entrypoint.core.base.errors import KimiError
from tests.cloud.conftest import need, render

OPS = {"sagemaker-model.json": "CreateModel", "sagemaker-endpoint-config.json": "CreateEndpointConfig",
       "sagemaker-endpoint.json": "CreateEndpoint"}


def bodies(env):
    return {OPS[name]: json.loads(text) for name, text in render("sagemaker", env).items()}


@pytest.fixture(scope="module")
def service_model():
    botocore_session = need("botocore.session")
    return botocore_session.get_session().get_service_model("sagemaker")


@pytest.mark.parametrize("hw", ["h100_2x_refused", "h200", "b200"])
def test_bodies_validate_against_the_service_model(service_model, hw):
    from botocore.validate import ParamValidator

    if hw == "h100_2x_refused":  # 8 x H100 cannot hold the model: a two-node plan is not an endpoint
        with pytest.raises(KimiError, match="one instance"):
            bodies({"KIMI_HARDWARE": "h100", "KIMI_NODES": "2", "KIMI_HEAD_ADDR": "x", "KIMI_IFACE": "eth0"})
        return
    for op, body in bodies({"KIMI_HARDWARE": hw}).items():
        report = ParamValidator().validate(body, service_model.operation_model(op).input_shape)
        assert not report.has_errors(), f"{op}: {report.generate_report()}"


def test_instance_type_timeouts_and_storage_fit_a_600_gb_load(service_model):
    variant = bodies({"KIMI_HARDWARE": "h200"})["CreateEndpointConfig"]["ProductionVariants"][0]
    offered = service_model.shape_for("ProductionVariantInstanceType").enum
    assert variant["InstanceType"] in offered
    limits = service_model.shape_for("ProductionVariant").members
    for key in ("ContainerStartupHealthCheckTimeoutInSeconds", "ModelDataDownloadTimeoutInSeconds"):
        assert variant[key] == limits[key].metadata["max"]  # the longest wait SageMaker allows
    # P5e's NVMe instance storage holds the weights; an EBS volume (max 512 GB) could not.
    assert "VolumeSizeInGB" not in variant and limits["VolumeSizeInGB"].metadata["max"] < 600


def test_container_environment_names_the_platform_and_no_secret():
    env = bodies({"KIMI_HARDWARE": "h200", "HF_TOKEN": "hf_secret"})["CreateModel"]["PrimaryContainer"]["Environment"]
    assert env["KIMI_PLATFORM"] == "sagemaker" and "hf_secret" not in json.dumps(env)


@pytest.mark.slow
def test_moto_sagemaker_accepts_the_requests(service_model):
    """moto 5.2.5's mock checks InstanceType against its own list, which stops before P5 (its
    models/sagemaker validation); the rendered type is checked against botocore's current enum
    and, for moto only, replaced by the newest GPU type moto knows. Everything else is as rendered."""
    moto = need("moto")
    boto3 = need("boto3")
    moto_type = "ml.p3.16xlarge"
    with moto.mock_aws():
        client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="testing",
                              aws_secret_access_key="testing")
        b = bodies({"KIMI_HARDWARE": "b200", "KIMI_IMAGE": "123456789012.dkr.ecr.us-east-1.amazonaws.com/kimi:b200"})
        variant = b["CreateEndpointConfig"]["ProductionVariants"][0]
        assert variant["InstanceType"] in service_model.shape_for("ProductionVariantInstanceType").enum
        variant["InstanceType"] = moto_type
        client.create_model(**b["CreateModel"])
        client.create_endpoint_config(**b["CreateEndpointConfig"])
        client.create_endpoint(**b["CreateEndpoint"])
        described = client.describe_model(ModelName=b["CreateModel"]["ModelName"])
        assert described["PrimaryContainer"]["Environment"]["KIMI_PLATFORM"] == "sagemaker"
        config = client.describe_endpoint_config(EndpointConfigName=b["CreateEndpointConfig"]["EndpointConfigName"])
        got = config["ProductionVariants"][0]
        assert got["ContainerStartupHealthCheckTimeoutInSeconds"] == variant["ContainerStartupHealthCheckTimeoutInSeconds"]


def test_a_one_node_recipe_on_h100_is_an_endpoint(service_model):
    """Kimi-Linear's 115 GB fit one 8 x H100 instance (TP 8), where K2.5 needs two nodes: its
    bodies validate, and the container resolves the same recipe."""
    from botocore.validate import ParamValidator

    found = bodies({"KIMI_RECIPE": "kimi-linear-48b-a3b-instruct", "KIMI_HARDWARE": "h100"})
    for op, body in found.items():
        report = ParamValidator().validate(body, service_model.operation_model(op).input_shape)
        assert not report.has_errors(), f"{op}: {report.generate_report()}"
    env = found["CreateModel"]["PrimaryContainer"]["Environment"]
    assert env["KIMI_RECIPE"] == "kimi-linear-48b-a3b-instruct" and env["KIMI_HARDWARE"] == "h100"


def test_an_update_keeps_the_old_instances_through_the_drain(service_model):
    """Issue 30: the old fleet serves its open streams for the drain and the exit before SageMaker
    stops it (no preStop there: all traffic moves to the new fleet first)."""
    rollout = bodies({"KIMI_HARDWARE": "h200"})["CreateEndpoint"]["DeploymentConfig"]["BlueGreenUpdatePolicy"]
    assert rollout["TrafficRoutingConfiguration"]["Type"] == "ALL_AT_ONCE"
    assert rollout["TerminationWaitInSeconds"] >= 300 + 1  # KIMI_DRAIN_TIMEOUT's default and a margin
    assert rollout["MaximumExecutionTimeoutInSeconds"] > rollout["TerminationWaitInSeconds"]
    shorter = bodies({"KIMI_HARDWARE": "h200", "KIMI_DRAIN_TIMEOUT": "60"})["CreateEndpoint"]
    assert 60 < shorter["DeploymentConfig"]["BlueGreenUpdatePolicy"]["TerminationWaitInSeconds"] < 300
    with pytest.raises(KimiError, match="TerminationWaitInSeconds"):
        bodies({"KIMI_HARDWARE": "h200", "KIMI_DRAIN_TIMEOUT": "3600", "KIMI_STOP_GRACE": "3645"})
