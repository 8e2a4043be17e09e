"""`kimi-serve plan --format sagemaker`: the request bodies of SageMaker's CreateModel,
CreateEndpointConfig and CreateEndpoint, for `aws sagemaker create-* --cli-input-json file://...`.

SageMaker starts the image as `docker run IMAGE serve` and sends traffic to port 8080 (/ping,
/invocations): the container follows that contract by itself (docs/cloud.md). The endpoint waits
up to an hour for the first healthy /ping (a 600 GB load); weights go to the instance's NVMe
storage (or an EBS volume where the instance has none).
"""

from __future__ import annotations

import json

from entrypoint.core.base.errors import UNSUPPORTED_COMBINATION, KimiError
from entrypoint.render.deployment import (checkpoint_gb, deployment_stop, health, image, one_instance, platform_env,
                                          platform_offering)

PID = "sagemaker"
ROLE_PLACEHOLDER = "arn:aws:iam::000000000000:role/REPLACE-with-your-SageMaker-execution-role"
VARIANT = "AllTraffic"


def _variant(launch, found, offer) -> dict:
    name = launch.name
    # SageMaker's API takes at most an hour here (ProductionVariant's range), which serving.yaml's
    # start period already is: a longer start-up budget cannot follow onto this platform.
    load_s = min(health(launch).start_period_s, launch.catalog.serving.health.start_period_s)
    variant = {"VariantName": VARIANT, "ModelName": name, "InstanceType": offer.instance_type,
               "InitialInstanceCount": 1, "ContainerStartupHealthCheckTimeoutInSeconds": load_s,
               "ModelDataDownloadTimeoutInSeconds": load_s}
    need = checkpoint_gb(launch)
    if offer.local_storage_gb and offer.local_storage_gb >= need:
        return variant  # instance storage holds the weights; SageMaker takes no volume size for it
    if found.max_volume_gb and need > found.max_volume_gb:
        raise KimiError(UNSUPPORTED_COMBINATION, f"{offer.instance_type} has no instance storage for {need} GB of "
                        f"weights and a SageMaker volume holds at most {found.max_volume_gb} GB. Stream the weights "
                        "from S3 instead (KIMI_MODEL=s3://bucket/<model>).")
    return {**variant, "VolumeSizeInGB": need}


# SageMaker's own bounds (botocore's service model: BlueGreenUpdatePolicy)
MAX_TERMINATION_WAIT_S = 3600
EXECUTION_TIMEOUT_S = (600, 28800)


def deployment_config(launch, load_s: int) -> dict:
    """How an update (UpdateEndpoint with a new endpoint config: a new image, new settings) replaces
    the fleet without cutting a stream: blue/green, all traffic to the new instances once they
    answer /ping, then the old ones keep running for the drain and the exit
    (TerminationWaitInSeconds) before SageMaker stops them. SageMaker has no preStop: the traffic
    shift is the pause."""
    budget = deployment_stop(launch)
    wait = budget.drain_s + budget.margin_s
    if wait > MAX_TERMINATION_WAIT_S:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_DRAIN_TIMEOUT={budget.drain_s} and the {budget.margin_s} s to "
                        f"exit make {wait} s, but SageMaker keeps an old instance at most {MAX_TERMINATION_WAIT_S} s "
                        f"after an update (TerminationWaitInSeconds): set KIMI_DRAIN_TIMEOUT to at most "
                        f"{MAX_TERMINATION_WAIT_S - budget.margin_s}.")
    low, high = EXECUTION_TIMEOUT_S
    timeout = min(high, max(low, 2 * load_s + wait))  # the new fleet's download and start, then the wait
    return {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0},
                                      "TerminationWaitInSeconds": wait, "MaximumExecutionTimeoutInSeconds": timeout}}


def requests(launch) -> dict:
    found, offer = platform_offering(launch, PID)
    one_instance(launch, PID, found.display_name)
    name = launch.name
    model = {"ModelName": name, "ExecutionRoleArn": ROLE_PLACEHOLDER,
             "PrimaryContainer": {"Image": image(launch), "Mode": "SingleModel",
                                  "Environment": platform_env(launch, PID)}}
    variant = _variant(launch, found, offer)
    config = {"EndpointConfigName": name, "ProductionVariants": [variant]}
    rollout = deployment_config(launch, variant["ContainerStartupHealthCheckTimeoutInSeconds"])
    # A rollout (docs/day2.md): a new model and endpoint config, then UpdateEndpoint with this DeploymentConfig.
    endpoint = {"EndpointName": name, "EndpointConfigName": name, "DeploymentConfig": rollout}
    return {"CreateModel": model, "CreateEndpointConfig": config, "CreateEndpoint": endpoint}


FILES = {"CreateModel": "sagemaker-model.json", "CreateEndpointConfig": "sagemaker-endpoint-config.json",
         "CreateEndpoint": "sagemaker-endpoint.json"}


def deployment_environ(environ, settings, sel) -> dict:
    return dict(environ)


def render(launch) -> dict:
    return {FILES[op]: json.dumps(body, indent=2) + "\n" for op, body in requests(launch).items()}
