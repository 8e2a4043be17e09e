"""checkov over the cloud renderings it has a framework for. The SageMaker files are request
bodies of CreateModel / CreateEndpointConfig / CreateEndpoint, whose fields are the properties of
CloudFormation's AWS::SageMaker::Model / EndpointConfig / Endpoint by name, so they are scanned
as that CloudFormation template: the only failed checks are the reasoned skips docs/security.md
lists for SageMaker (a request body cannot carry a skip: the API refuses unknown keys). checkov
has no framework for Vertex AI request bodies, Azure ML YAML or SkyPilot tasks; docs/security.md
says what of the principles they follow."""

from __future__ import annotations

import json
import re

import pytest

from tests.deploy.shapes import render
from tests.security import scanner

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # the scanner's venv (installed once)

CFN_TYPES = {"sagemaker-model.json": "AWS::SageMaker::Model",
             "sagemaker-endpoint-config.json": "AWS::SageMaker::EndpointConfig",
             "sagemaker-endpoint.json": "AWS::SageMaker::Endpoint"}
SHAPES = {"h200": {"KIMI_HARDWARE": "h200"}, "b200": {"KIMI_HARDWARE": "b200"}}


def _documented_sagemaker_skips() -> set:
    text = (scanner.ROOT / "docs" / "security.md").read_text()
    section = text.split("## Reasoned skips", 1)[1].split("\n## ", 1)[0]
    return {check for row in section.splitlines() if "SageMaker" in row
            for check in re.findall(r"`(CKV2?_AWS_\d+)`", row)}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("cloud-scan")
    for case, environ in SHAPES.items():
        files = render("sagemaker", environ)
        assert set(files) == set(CFN_TYPES)
        resources = {CFN_TYPES[name].split("::")[-1]: {"Type": CFN_TYPES[name], "Properties": json.loads(text)}
                     for name, text in files.items()}
        template = {"AWSTemplateFormatVersion": "2010-09-09", "Resources": resources}
        (out / f"sagemaker-{case}.json").write_text(json.dumps(template, indent=2))
    return scanner.scan(scanner.ensure(), "cloudformation", out)


def test_sagemaker_fails_only_its_reasoned_skips(reports):
    documented = _documented_sagemaker_skips()
    assert documented, "docs/security.md lists no SageMaker skip"
    failed = scanner.by_file(reports, "failed_checks")
    passed = scanner.by_file(reports, "passed_checks")
    for case in SHAPES:
        name = f"sagemaker-{case}.json"
        assert {r["check_id"] for r in failed.get(name, [])} == documented, failed.get(name)
        # checkov read the template: it judged the model (checkov 3.3.30 has one CloudFormation check
        # for these three resource types, CKV_AWS_370, network isolation of the model)
        judged = {r["resource"] for r in failed.get(name, []) + passed.get(name, [])}
        assert "AWS::SageMaker::Model.Model" in judged, judged
