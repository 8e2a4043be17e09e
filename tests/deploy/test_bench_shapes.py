"""`kimi-serve plan --format k8s-bench | compose-bench`: bench as a Kubernetes Job against the
deployment's Service and as a Compose one-shot service beside the deployment's. Validated by the
Kubernetes client's models and the Compose Specification; their command is one `bench` accepts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import click
import jsonschema
import pytest
import yaml

from entrypoint.app.deploy import deployment_launch
from entrypoint.app.launch import with_peers
from entrypoint.core.compose.settings import read_settings
from entrypoint.cli.bench import command as bench_command
from entrypoint.render import docker_compose, k8s
from entrypoint.render.bench_job import COMPOSE_FILE, K8S_FILE, ComposeBench, K8sBench
from tests.conftest import COMPOSE_CONFIG_BOUND_S, IN_CI
from tests.deploy.k8s_schema import _roundtrip
from tests.deploy.shapes import COMPOSE, K8S, container_environ, documents
from tests.testdata import COMPOSE_SPEC


def _bench_args_parse(args: list) -> dict:
    """The rendered command, parsed by bench's own options (an unknown or bad one raises)."""
    assert args[0] == "bench"
    with click.Context(bench_command) as ctx:
        return bench_command.make_context("bench", list(args[1:]), parent=ctx).params


@pytest.mark.parametrize("case", ["single-h200", "multi_node_tp-h100x2", "pd-h200"])
def test_the_job_runs_bench_once_against_the_deployments_service(case):
    environ = K8S[case]
    (job,) = yaml.safe_load_all(K8sBench.render(deployment_launch(K8sBench, environ))[K8S_FILE])
    _roundtrip(job, "V1Job")
    service = next(d for d in documents("k8s", environ) if d["kind"] == "Service")
    assert job["metadata"]["namespace"] == service["metadata"]["namespace"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    (container,) = pod["containers"]
    params = _bench_args_parse(container["args"])
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert params["url"] == f"http://{host}:{service['spec']['ports'][0]['port']}"
    assert params["output_format"] == "json"  # the run's JSON is the Job's log
    assert job["spec"]["activeDeadlineSeconds"] > params["timeout"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["capabilities"] == {"drop": ["ALL"]}
    assert not security["allowPrivilegeEscalation"] and pod["securityContext"]["runAsNonRoot"]
    assert not any("nvidia.com" in k or "amd.com" in k for k in container["resources"]["limits"])  # no GPU
    env = {e["name"]: e["value"] for e in container["env"]}
    served = documents("k8s", environ)
    server_env = {k: v for d in served if d["kind"] in ("Deployment",)
                  for k, v in container_environ(served, d["spec"]["template"]["spec"]["containers"][0]).items()}
    assert env["KIMI_HARDWARE"] == environ["KIMI_HARDWARE"]  # the same launch plan: GPUs, hardware, variant
    if server_env:  # the same settings, read as the server reads its own (its ConfigMap, then its variables)
        def told(environ):
            started = {**environ, **with_peers(environ)}  # as a container's start reads them (its peers named)
            values = read_settings({k: v for k, v in started.items() if k != "KIMI_ROLE"}).values
            # less the pods' own naming of their peers (KIMI_NAME, KIMI_PEER_NAMES): the Job is no pod of the deployment
            return {k: v for k, v in values.items() if k not in ("config_json", "name", "peer_names")}

        assert told(env) == told(server_env)
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert {v.split("=")[0] for v in annotations.values()} >= {"CKV_K8S_8", "CKV_K8S_9"}


@pytest.mark.parametrize("case", ["single-h200", "pd-shared-b200"])
def test_the_compose_one_shot_service_joins_the_deployments_file(case):
    environ = COMPOSE[case]
    main = yaml.safe_load(docker_compose.render(deployment_launch(docker_compose, environ))[docker_compose.FILE])
    extra = yaml.safe_load(ComposeBench.render(deployment_launch(ComposeBench, environ))[COMPOSE_FILE])
    merged = {**main, "services": {**main["services"], **extra["services"]}}
    jsonschema.validate(merged, json.loads(COMPOSE_SPEC.read_text()), cls=jsonschema.Draft7Validator)
    (_name, svc), = extra["services"].items()
    (waits_for, condition), = svc["depends_on"].items()
    assert waits_for in main["services"] and condition == {"condition": "service_healthy"}
    assert "healthcheck" in main["services"][waits_for]
    port = next(p for p in deployment_launch(docker_compose, environ).plan.processes if p.role in ("single", "router")).port
    params = _bench_args_parse(svc["command"])
    assert params["url"] == f"http://127.0.0.1:{port}"
    assert svc["profiles"] == ["bench"] and svc["restart"] == "no"  # `docker compose up` never starts it
    assert svc["environment"]["KIMI_HARDWARE"] == environ["KIMI_HARDWARE"]


def test_docker_compose_config_accepts_the_pair(tmp_path):
    exe = shutil.which("docker-compose")
    if exe is None:
        if IN_CI:
            pytest.fail("CI=true but docker-compose is missing (apt-get install docker-compose)")
        pytest.skip("docker-compose is not installed")
    environ = COMPOSE["single-h200"]
    (tmp_path / docker_compose.FILE).write_text(docker_compose.render(deployment_launch(docker_compose, environ))[docker_compose.FILE])
    (tmp_path / COMPOSE_FILE).write_text(ComposeBench.render(deployment_launch(ComposeBench, environ))[COMPOSE_FILE])
    proc = subprocess.run([exe, "-f", str(tmp_path / docker_compose.FILE), "-f", str(tmp_path / COMPOSE_FILE),
                           "--profile", "bench", "config"], capture_output=True, text=True,
                          timeout=COMPOSE_CONFIG_BOUND_S,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert "kimi-k2-5-bench" in yaml.safe_load(proc.stdout)["services"]


def test_a_multi_node_deployment_has_no_compose_bench():
    from entrypoint.core.base.errors import KimiError

    with pytest.raises(KimiError, match="render Kubernetes manifests instead"):
        ComposeBench.render(deployment_launch(ComposeBench, K8S["multi_node_tp-h100x2"]))


def test_the_k8s_file_of_the_deployment_has_no_job():
    assert "Job" not in {d["kind"] for d in documents("k8s", K8S["single-h200"])}
    assert k8s.FILE != K8S_FILE
