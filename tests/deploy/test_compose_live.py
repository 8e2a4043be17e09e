"""A rendered one-node PD compose file comes up for real on the Docker engine, with the
project's image built on the stand-in vLLM base: the one-shot download service fetches the
weights from the Hub stand-in (tests/weights/hub_standin.py, on the host's loopback, which the
host-network containers share) into the cache volume and exits 0, then every service starts
and launches its process of the plan, the router reaches both pools on loopback, healthchecks
turn healthy, and `docker-compose down` stops everything with the stand-ins' clean exit.
The services run as the file renders them, hardened: the image's non-root user, read-only root,
tmpfs scratch, no capabilities, no new privileges, and the token as a secret file each process
can read."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest
import yaml

from entrypoint.render import docker_compose
from tests.conftest import IN_CI, read_standin_record
from tests.deploy.shapes import COMPOSE, launch_for
from tests.weights.hub_standin import Hub, draft_repo, kimi_like_repo

pytestmark = [pytest.mark.slow, pytest.mark.docker]

TARGET = "b200"  # amd64; half of its node holds the INT4 weights, so each pool may share it
PORTS = (8000, 8001, 8002)  # router, prefill, decode on the host network
# ... bound on 127.0.0.1 only (KIMI_HOST, KIMI_ROUTER_HOST): the live shapes bind the same ports on
# their own loopback hosts (127.0.1.x) in the other lane of the suite (tests/conftest.py LIVE_LANE)
LOOPBACK = {"KIMI_HOST": "127.0.0.1", "KIMI_ROUTER_HOST": "127.0.0.1"}
HEALTHY_WITHIN_S = 180
FAKE_TOKEN = "hf_live_test_token_not_real"


def _docker_compose() -> str:
    exe = shutil.which("docker-compose")
    if exe is None:
        if IN_CI:
            pytest.fail("CI=true but docker-compose is missing (apt-get install docker-compose)")
        pytest.skip("docker-compose is not installed")
    return exe


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _wait_ports_free(timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(_port_free(p) for p in PORTS):
        assert time.monotonic() < deadline, f"ports {PORTS} on 127.0.0.1 stay busy; the compose file needs them"
        time.sleep(2)


def _containers(client, project: str) -> dict:
    found = client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
    return {c.labels["com.docker.compose.service"]: c for c in found}


def _wait_healthy(client, project: str, services) -> dict:
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while True:
        containers = _containers(client, project)
        states = {s: (c.attrs["State"].get("Health") or {}).get("Status") for s, c in containers.items()}
        states = {s: v for s, v in states.items() if s in services}
        if set(services) <= set(containers) and all(v == "healthy" for v in states.values()):
            return containers
        if time.monotonic() > deadline:
            logs = {s: c.logs().decode(errors="replace")[-2000:] for s, c in containers.items()}
            pytest.fail(f"not healthy within {HEALTHY_WITHIN_S}s: {states}\n{logs}")
        time.sleep(2)
        for c in containers.values():
            c.reload()


def test_pd_cluster_on_one_node_comes_up(built_images, docker_client, tmp_path):
    exe = _docker_compose()
    built = built_images.get(TARGET)
    assert built and built.get("tags"), f"no {TARGET} image was built:\n{built_images['_stderr'][-3000:]}"
    project = f"kimi-deploy-test-{os.getpid()}"
    environ = {**COMPOSE["pd-shared-b200"], **LOOPBACK, "KIMI_IMAGE": built["tags"][0], "KIMI_PREFLIGHT": "off"}
    launch = launch_for("compose", environ)
    doc = yaml.safe_load(docker_compose.render(launch)[docker_compose.FILE])
    download = doc["services"].pop(docker_compose.download_name(launch))
    for svc in doc["services"].values():
        svc.pop("deploy", None)  # this machine has no GPUs, and the stand-in vllm needs none
        svc["healthcheck"]["interval"] = "2s"  # ask early; the rendered start period is kept
    with Hub([kimi_like_repo()[0], draft_repo()]) as hub:
        download["environment"]["HF_ENDPOINT"] = hub.url
        doc["services"] = {docker_compose.download_name(launch): download, **doc["services"]}
        _up_and_down(exe, docker_client, project, doc, launch, tmp_path)
    assert hub.bodies_done, "the download service fetched nothing"


def _up_and_down(exe, docker_client, project, doc, launch, tmp_path):
    path = tmp_path / docker_compose.FILE
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    token = tmp_path / "hf_token"  # the secret file beside the compose file, as the header says
    token.write_text(FAKE_TOKEN)
    token.chmod(0o444)  # the test cannot chown to the image's UID; world-readable stands in
    cmd = [exe, "-p", project, "-f", str(path)]
    _wait_ports_free()
    since = int(time.time()) - 1
    up = subprocess.run([*cmd, "up", "-d"], capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stderr
        serving = [s for s in doc["services"] if s != docker_compose.download_name(launch)]
        containers = _wait_healthy(docker_client, project, serving)
        by_name = {f"{launch.name}-{p.role}": p for p in launch.plan.processes}
        for service, proc in by_name.items():
            record = read_standin_record(containers[service].logs().decode(errors="replace"))
            assert record is not None, f"{service} did not launch the stand-in"
            assert record["uid"] == int(doc["services"][service]["user"]) >= 10000, service
            assert "HF_TOKEN" not in record["env"] and FAKE_TOKEN not in str(record["env"])
            read = containers[service].exec_run(["cat", record["env"]["HF_TOKEN_PATH"]])
            assert read.exit_code == 0 and read.output.decode() == FAKE_TOKEN, read.output
            state = containers[service].attrs["HostConfig"]
            assert state["ReadonlyRootfs"] is True and state["CapDrop"] == ["ALL"], service
            assert record["argv"] == list(proc.argv), service
            assert {k: record["env"].get(k) for k in proc.env} == proc.env, service
        router = containers[f"{launch.name}-router"]
        argv = list(by_name[f"{launch.name}-router"].argv)
        pools = [argv[i + 1] for i, a in enumerate(argv) if a in ("--prefill", "--decode")]
        assert pools == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
        for proc in launch.plan.processes:  # nothing on the host's other addresses (the live lane's)
            assert proc.argv[proc.argv.index("--host") + 1] == "127.0.0.1", proc.role
        for url in pools:
            probe = f"import urllib.request as u; print(u.urlopen('{url}/health').status)"
            reach = router.exec_run(["python3", "-c", probe])
            assert reach.exit_code == 0 and reach.output.strip() == b"200", reach.output
    finally:
        down = subprocess.run([*cmd, "down", "-v", "--timeout", "30"], capture_output=True, text=True, timeout=300)
    assert down.returncode == 0, down.stderr
    assert _containers(docker_client, project) == {}
    deaths = docker_client.events(since=since, until=int(time.time()) + 1, decode=True,
                                  filters={"label": f"com.docker.compose.project={project}", "event": "die"})
    codes = {e["Actor"]["Attributes"]["com.docker.compose.service"]: e["Actor"]["Attributes"]["exitCode"]
             for e in deaths}
    assert codes == {service: "0" for service in doc["services"]}  # SIGTERM reached each process
