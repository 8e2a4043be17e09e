"""The image started the way each platform starts it (real Docker engine, stand-in vLLM base):
the right argv, port and model, the platform's health route answered, the image HEALTHCHECK on
the same port; an s3:// model against a local S3-compatible server (moto's) passes preflight with
credentials and fails it clearly without. Builds only the h200 image."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.conftest import TEST_REGISTRY, run_build_py, wait_standin_record

pytestmark = [pytest.mark.slow, pytest.mark.docker]
TARGET = "h200"
NO_GPU = {"KIMI_PREFLIGHT": "warn"}  # the test machine has no GPU: node checks warn


@pytest.fixture(scope="module")
def image(docker_client, tmp_path_factory):
    from buildsys import standin, targets

    standin.ensure("amd64")  # the one architecture this target needs
    pattern = standin.image_name("{arch}")
    overrides = [a for kind in targets.load().bases for a in ("--base-override", f"{kind}={pattern}")]
    out = tmp_path_factory.mktemp("build") / "results.json"
    run_build_py("build", TARGET, "--registry", TEST_REGISTRY, *overrides, "--json-out", str(out))
    (result,) = [r for r in json.loads(out.read_text()) if r["target"] == TARGET]
    assert result["ok"], result
    return result["image_id"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(container, port: int, path: str, timeout=30) -> int:
    """GET a route from inside the container, as the platform's prober does (the shared test
    engine publishes no ports)."""
    probe = ("import sys,urllib.request as u\n"
             f"print(u.urlopen('http://127.0.0.1:{port}{path}', timeout=2).status)")
    deadline = time.monotonic() + timeout
    while True:
        code, out = container.exec_run(["python3", "-c", probe])
        if code == 0 or time.monotonic() > deadline:
            return int(out.decode().strip()) if code == 0 else -1
        time.sleep(0.5)


def _run(client, image, args, env, **kw):
    return client.containers.run(image, args, environment={**NO_GPU, **env}, detach=True, **kw)


def _healthcheck(container) -> tuple:
    code, out = container.exec_run(["kimi-serve", "healthcheck"])
    return code, out.decode()


def test_sagemaker_docker_run_image_serve(docker_client, image, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    c = _run(docker_client, image, ["serve"], {"SM_VLLM_MAX_MODEL_LEN": "4096"},
             volumes={str(model): {"bind": "/opt/ml/model", "mode": "ro"}}, network_mode="none")
    try:
        record = wait_standin_record(c)
        assert record, c.logs().decode()[-3000:]
        argv = record["argv"]
        assert argv[:3] == ["vllm", "serve", "/opt/ml/model"] and "serve" not in argv[3:]
        assert argv[argv.index("--port") + 1] == "8080" and argv[argv.index("--max-model-len") + 1] == "4096"
        assert argv[argv.index("--served-model-name") + 1] == "moonshotai/Kimi-K2.5"
        assert _get(c, 8080, "/ping") == 200  # SageMaker's health route
        code, out = _healthcheck(c)  # the image HEALTHCHECK, without the `serve` argument
        assert code == 0 and ":8080/" in out, out
    finally:
        c.remove(force=True)


def test_vertex_aip_variables(docker_client, image):
    env = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "7080", "AIP_HEALTH_ROUTE": "/health",
           "AIP_PREDICT_ROUTE": "/v1/chat/completions"}
    c = _run(docker_client, image, [], env, network_mode="none")
    try:
        record = wait_standin_record(c)
        assert record, c.logs().decode()[-3000:]
        argv = record["argv"]
        assert argv[2] == "moonshotai/Kimi-K2.5" and argv[argv.index("--port") + 1] == "7080"
        assert _get(c, 7080, "/health") == 200  # the route AIP_HEALTH_ROUTE names
        code, out = _healthcheck(c)
        assert code == 0 and ":7080/" in out, out
    finally:
        c.remove(force=True)


@pytest.fixture(scope="module")
def s3_server():
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    url = f"http://127.0.0.1:{port}"
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    s3.create_bucket(Bucket="weights")
    for key in ("Kimi-K2.5/config.json", "Kimi-K2.5/model-00001-of-00002.safetensors",
                "Kimi-K2.5/model-00002-of-00002.safetensors"):
        s3.put_object(Bucket="weights", Key=key, Body=b"{}")
    yield url
    server.stop()


def _doctor_model_source(client, image, env) -> dict:
    c = client.containers.run(image, ["doctor", "--format", "json"], environment=env, network_mode="host",
                              detach=True)
    try:
        c.wait(timeout=120)  # exit 1: this machine has no GPU, so other checks fail
        out = c.logs(stdout=True, stderr=False).decode()
    finally:
        c.remove(force=True)
    checks = {check["check"]: check for check in json.loads(out)["checks"]}
    return checks["model_source"]


S3_ENV = {"KIMI_MODEL": "s3://weights/Kimi-K2.5", "AWS_EC2_METADATA_DISABLED": "true"}
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret"}


def test_s3_model_passes_preflight_with_credentials(docker_client, image, s3_server):
    check = _doctor_model_source(docker_client, image, {**S3_ENV, **CREDENTIALS, "AWS_ENDPOINT_URL": s3_server})
    assert check["status"] == "ok" and "2 safetensors" in check["message"], check
    assert "testing-secret" not in check["message"]


def test_s3_model_fails_preflight_clearly_without_credentials(docker_client, image, s3_server):
    check = _doctor_model_source(docker_client, image, {**S3_ENV, "AWS_ENDPOINT_URL": s3_server})
    assert check["status"] == "error" and "no credentials" in check["message"], check
    assert "AWS_ACCESS_KEY_ID" in check["message"]


def test_s3_prefix_without_a_checkpoint_fails_preflight(docker_client, image, s3_server):
    env = {**S3_ENV, **CREDENTIALS, "AWS_ENDPOINT_URL": s3_server, "KIMI_MODEL": "s3://weights/nothing-here"}
    check = _doctor_model_source(docker_client, image, env)
    assert check["status"] == "error" and "config.json" in check["message"], check
