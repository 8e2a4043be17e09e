"""`kimi-serve plan --format azureml`: an Azure ML managed online endpoint and its deployment
(CLI v2 YAML), for `az ml online-endpoint create` / `az ml online-deployment create`.

The environment is the project's image with its inference routes (liveness and readiness on
/health, scoring on /v1/chat/completions, vLLM's port); probes allow an hour for the load.
"""

from __future__ import annotations

from entrypoint.render.deployment import (health, image, one_instance, platform_env, platform_offering,
                                          serving_port)
from entrypoint.render.yamltext import dump

PID = "azureml"
DEPLOYMENT_SCHEMA = "https://azuremlschemas.azureedge.net/latest/managedOnlineDeployment.schema.json"
ENDPOINT_SCHEMA = "https://azuremlschemas.azureedge.net/latest/managedOnlineEndpoint.schema.json"
REQUEST_TIMEOUT_MS = 180000  # the managed endpoint's maximum: long generations stream for minutes
FILES = ("azureml-endpoint.yml", "azureml-deployment.yml")


def documents(launch) -> tuple:
    found, offer = platform_offering(launch, PID)
    one_instance(launch, PID, found.display_name)
    name, port, timing = launch.name, serving_port(launch), health(launch)
    probe = {"period": timing.interval_s, "timeout": timing.timeout_s}
    routes = {"liveness_route": {"port": port, "path": timing.path},
              "readiness_route": {"port": port, "path": found.routes["health"].path},
              "scoring_route": {"port": port, "path": found.routes["predict"].path}}
    endpoint = {"$schema": ENDPOINT_SCHEMA, "name": name, "auth_mode": "key"}
    deployment = {
        "$schema": DEPLOYMENT_SCHEMA, "name": name, "endpoint_name": name,
        "environment": {"name": name, "image": image(launch), "inference_config": routes},
        "environment_variables": platform_env(launch, PID),
        "instance_type": offer.instance_type, "instance_count": 1,
        "request_settings": {"request_timeout_ms": REQUEST_TIMEOUT_MS},
        # Liveness starts after the load may have ended; readiness gates traffic from the start.
        "liveness_probe": {"initial_delay": timing.start_period_s, **probe, "failure_threshold": timing.retries},
        "readiness_probe": {"initial_delay": timing.interval_s, **probe,
                            "failure_threshold": timing.start_period_s // timing.interval_s},
    }
    return endpoint, deployment


def deployment_environ(environ, settings, sel) -> dict:
    return dict(environ)


def render(launch) -> dict:
    return {name: dump(doc) for name, doc in zip(FILES, documents(launch))}
