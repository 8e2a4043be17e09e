"""`kimi-serve plan --format vertex`: Vertex AI's UploadModel and DeployModel request bodies
(REST v1: `models:upload`, `endpoints/ENDPOINT:deployModel`).

The container spec names the port, the health and predict routes (routes vLLM answers), shared
memory and a startup probe that allows an hour for the load; the deployment asks for the machine
type and accelerators that carry the hardware.
"""

from __future__ import annotations

import json

from entrypoint.render.deployment import health, image, one_instance, platform_env, platform_offering

PID = "vertex"
FILES = ("vertex-model-upload.json", "vertex-deploy-model.json")


def _probe(timing, port: int, failures: int) -> dict:
    return {"httpGet": {"path": timing.path, "port": port}, "periodSeconds": timing.interval_s,
            "timeoutSeconds": timing.timeout_s, "failureThreshold": failures}


def requests(launch) -> tuple:
    found, offer = platform_offering(launch, PID)
    one_instance(launch, PID, found.display_name)
    port, timing = int(found.contract["port"].value), health(launch)
    env = {**platform_env(launch, PID)}
    spec = {"imageUri": image(launch), "env": [{"name": k, "value": v} for k, v in env.items()],
            "ports": [{"containerPort": port}], "healthRoute": found.routes["health"].path,
            "predictRoute": found.routes["predict"].path, "sharedMemorySizeMb": str(found.shared_memory_mb),
            "startupProbe": _probe(timing, port, timing.start_period_s // timing.interval_s),
            "healthProbe": _probe(timing, port, timing.retries)}
    upload = {"model": {"displayName": launch.name, "containerSpec": spec}}
    machine = {"machineType": offer.machine_type, "acceleratorType": offer.accelerator_type,
               "acceleratorCount": offer.accelerator_count}
    deploy = {"deployedModel": {"model": "projects/PROJECT/locations/REGION/models/MODEL_ID",
                                "displayName": launch.name,
                                "dedicatedResources": {"machineSpec": machine, "minReplicaCount": 1,
                                                       "maxReplicaCount": 1}},
              "trafficSplit": {"0": 100}}
    return upload, deploy


def deployment_environ(environ, settings, sel) -> dict:
    return dict(environ)


def render(launch) -> dict:
    return {name: json.dumps(body, indent=2) + "\n" for name, body in zip(FILES, requests(launch))}
