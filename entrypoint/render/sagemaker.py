"""`kimi-serve plan --format sagemaker`: the request bodies of SageMaker's CreateModel,
CreateEndpointConfig and CreateEndpoint, for `aws sagemaker create-* --cli-input-json file://...`.

SageMaker starts the image as `docker run IMAGE serve` and sends traffic to port 8080 (/ping,
/invocations): the container follows that contract by itself (docs/cloud.md). The endpoint waits
up to an hour for the first healthy /ping (a 600 GB load); weights go to the instance's NVMe
storage (or an EBS volume where the instance has none).
"""

from __future__ import annotations

import json

from entrypoint.core.errors import UNSUPPORTED_COMBINATION, KimiError
from entrypoint.render.deployment import (checkpoint_gb, health, image, one_instance, platform_env,
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


def requests(launch) -> dict:
    found, offer = platform_offering(launch, PID)
    one_instance(launch, PID, found.display_name)
    name = launch.name
    model = {"ModelName": name, "ExecutionRoleArn": ROLE_PLACEHOLDER,
             "PrimaryContainer": {"Image": image(launch), "Mode": "SingleModel",
                                  "Environment": platform_env(launch, PID)}}
    config = {"EndpointConfigName": name, "ProductionVariants": [_variant(launch, found, offer)]}
    endpoint = {"EndpointName": name, "EndpointConfigName": name}
    return {"CreateModel": model, "CreateEndpointConfig": config, "CreateEndpoint": endpoint}


FILES = {"CreateModel": "sagemaker-model.json", "CreateEndpointConfig": "sagemaker-endpoint-config.json",
         "CreateEndpoint": "sagemaker-endpoint.json"}


def deployment_environ(environ, settings, sel) -> dict:
    return dict(environ)


def render(launch) -> dict:
    return {FILES[op]: json.dumps(body, indent=2) + "\n" for op, body in requests(launch).items()}
