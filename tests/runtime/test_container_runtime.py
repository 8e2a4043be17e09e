"""The runtime in a real container built from the stand-in base (Docker engine needed; slow):
signal delivery and exit code, the non-root default user (hardened as the rendered Compose file
runs it: read-only root, tmpfs scratch, no capabilities, no new privileges), root one `--user 0`
away, an arbitrary non-root UID, preflight, doctor and healthcheck."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import wait_standin_record

pytestmark = [pytest.mark.slow, pytest.mark.docker]
TARGET = "h200"  # an amd64 target with a single-node default launch
NO_PREFLIGHT = {"KIMI_PREFLIGHT": "off"}  # the stand-in node has no GPU
VIDEO_GID = 44  # Debian's and Ubuntu's video group, which owns AMD's /dev/dri/card* on the host


@pytest.fixture(scope="module")
def image(built_images):
    r = built_images.get(TARGET)
    assert r and r["ok"], f"{TARGET} did not build: {(r or {}).get('error')}\n{built_images['_stderr'][-3000:]}"
    return r["image_id"]


def _start(client, image, args=None, **kw):
    return client.containers.run(image, args or [], detach=True, network_mode="none", **kw)


def _record(container, timeout=60):
    return wait_standin_record(container, timeout)


def _finish(container, timeout=120):
    code = container.wait(timeout=timeout)["StatusCode"]
    out = container.logs(stdout=True, stderr=False).decode()
    err = container.logs(stdout=False, stderr=True).decode()
    container.remove(force=True)
    return code, out, err


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_signal_reaches_vllm_directly_and_its_exit_code_is_the_containers(docker_client, image, signal_name):
    c = _start(docker_client, image, environment=NO_PREFLIGHT)
    try:
        record = _record(c)
        assert record and record["pid"] == 1, c.logs().decode()[-2000:]
        code, cmdline = c.exec_run(["cat", "/proc/1/cmdline"])
        assert b"vllm" in cmdline and b"kimi-serve" not in cmdline  # exec'd: no wrapper left behind
        c.kill(signal=signal_name)
        code = c.wait(timeout=30)["StatusCode"]
        assert code == 0 and "KIMI-STANDIN-SIGTERM" in c.logs().decode()  # the stand-in's own exit code
    finally:
        c.remove(force=True)


def test_preflight_stops_a_gpu_less_start_with_a_clear_message(docker_client, image):
    code, _, err = _finish(_start(docker_client, image))
    assert code == 2 and "preflight found" in err, err[-3000:]
    assert "gpu_count" in err and "/dev/nvidiactl" in err and "KIMI_PREFLIGHT=warn" in err
    assert "KIMI-STANDIN-RECORD" not in err


def _image_user(client, image) -> int:
    user = client.images.get(image).attrs["Config"]["User"]
    assert user.isdigit(), f"USER must be numeric for Kubernetes' runAsNonRoot: {user!r}"
    return int(user)


def test_default_user_is_non_root_with_the_gpu_groups_on_a_hardened_container(docker_client, image):
    """As the rendered Compose file runs it: read-only root, exec-able tmpfs scratch for /tmp and
    HOME, the cache a volume (a tmpfs here), every capability dropped, no new privileges."""
    uid = _image_user(docker_client, image)
    assert uid >= 10000
    scratch = "exec,mode=1777"
    c = _start(docker_client, image, environment={"KIMI_PREFLIGHT": "warn"}, read_only=True,
               tmpfs={"/tmp": scratch, "/home/kimi": scratch, "/cache": scratch}, cap_drop=["ALL"],
               security_opt=["no-new-privileges:true"])
    try:
        record = _record(c)
        assert record and record["uid"] == uid and record["pid"] == 1, c.logs().decode()[-2000:]
        assert record["env"]["HOME"] == "/home/kimi" and record["env"]["HF_HOME"] == "/cache/huggingface"
        code, out = c.exec_run(["id", "-G"])
        assert code == 0 and VIDEO_GID in {int(g) for g in out.split()}, out
        code, out = c.exec_run(["sh", "-c", "touch /opt/kimi/x 2>&1; grep CapEff /proc/1/status"])
        assert b"Read-only file system" in out and b"CapEff:\t0000000000000000" in out, out
    finally:
        c.remove(force=True)


def test_root_is_one_user_flag_away(docker_client, image):
    c = _start(docker_client, image, environment=NO_PREFLIGHT, user="0")
    try:
        record = _record(c)
        assert record and record["uid"] == 0, c.logs().decode()[-2000:]
    finally:
        c.remove(force=True)


@pytest.mark.parametrize("home", [None, "/"])
def test_arbitrary_non_root_uid_gets_writable_home_and_caches(docker_client, image, home):
    env = {"KIMI_PREFLIGHT": "warn", "KIMI_LOG_FORMAT": "json", **({"HOME": home} if home else {})}
    c = _start(docker_client, image, environment=env, user="1000370000:0")
    try:
        record = _record(c)
        assert record and record["uid"] == 1000370000, c.logs().decode()[-2000:]
        seen = record["env"]
        assert seen["HF_HOME"] == "/cache/huggingface"
        # an engine's vLLM cache is its keyed compile cache on the volume (issue 30: docs/day2.md)
        compiled = seen["VLLM_CACHE_ROOT"]
        assert compiled.startswith("/cache/compile/vllm") and compiled.endswith("/vllm"), compiled
        expected_home = "/cache/home" if home == "/" else "/home/kimi"
        assert seen["HOME"] == expected_home
        code, _ = c.exec_run(["sh", "-c", f"test -w {expected_home} && test -d /cache/huggingface && test -w {compiled}"],
                             user="1000370000:0")
        assert code == 0
        logs = [json.loads(line) for line in c.logs(stdout=False, stderr=True).decode().splitlines()
                if line.startswith("{")]
        assert {"hardware", "cache", "preflight.gpu_count", "preflight.cache"} <= {e["event"] for e in logs}
    finally:
        c.remove(force=True)


def test_doctor_in_the_container(docker_client, image):
    code, out, err = _finish(_start(docker_client, image, ["doctor", "--format", "json"]))
    report = json.loads(out)
    assert code == 1 and report["ok"] is False, err
    assert report["detection"]["count"] == 0 and report["launch"]["hardware"] == TARGET
    status = {c["check"]: c["status"] for c in report["checks"]}
    assert status["platform"] == "error" and status["gpu_count"] == "error"


def test_healthcheck_against_the_standin_health(docker_client, image):
    c = _start(docker_client, image, environment=NO_PREFLIGHT)
    try:
        assert _record(c), c.logs().decode()[-2000:]
        deadline, code, out = time.monotonic() + 30, None, b""
        while time.monotonic() < deadline:
            code, out = c.exec_run(["kimi-serve", "healthcheck"])
            if code == 0:
                break
            time.sleep(0.5)
        assert code == 0 and out.decode() == "healthy: single http://127.0.0.1:8000/health: HTTP 200\n", out
        code, out = c.exec_run(["kimi-serve", "healthcheck"], environment={"KIMI_PORT": "8999"})
        assert code == 1 and out.decode().startswith("unhealthy: single http://127.0.0.1:8999/health")
    finally:
        c.remove(force=True)
