"""Every target built with the real build.py from stand-in bases, smoke-tested and run (slow)."""

import json
import time

import pytest

from buildsys import targets
from tests.conftest import NO_GPU_ENV, TEST_REGISTRY, read_standin_record

pytestmark = [pytest.mark.slow, pytest.mark.docker]
DATA = targets.load()
TARGETS = list(DATA.targets)
STOP_TIMEOUT = 20


EVERY_RECIPE = ("kimi-k2-instruct", "kimi-k2-thinking", "kimi-k2.5", "kimi-k2.6", "kimi-k2.7-code", "kimi-k3.1-pro",
                "kimi-k3", "kimi-linear-48b-a3b-instruct")
NVIDIA_ONLY = ("kimi-k3.1-pro",)  # its recipe leaves AMD and the cpu target out (hardware_left_out)


def image_of(built_images, target):
    r = built_images.get(target)
    assert r and r["ok"], f"{target} did not build/smoke: {(r or {}).get('error')}\n{built_images['_stderr'][-3000:]}"
    return r["image_id"]


@pytest.mark.parametrize("target", TARGETS)
def test_builds_and_passes_smoke(built_images, docker_client, target):
    image = image_of(built_images, target)
    attrs = docker_client.images.get(image).attrs
    assert attrs["Architecture"] == DATA.targets[target].arch
    assert attrs["Config"]["StopSignal"] == "SIGTERM"  # what vLLM drains on (docs/day2.md)
    tags = set(attrs["RepoTags"])
    assert {f"{TEST_REGISTRY}/kimi:{target}", f"{TEST_REGISTRY}/kimi:{DATA.vllm_version}-{target}"} <= tags
    # The base's vLLM release is baked in: the grammar launches are checked against, and a label.
    assert f"KIMI_VLLM_VERSION={DATA.vllm_version}" in attrs["Config"]["Env"]
    assert attrs["Config"]["Labels"]["org.kimi-serve.vllm-version"] == DATA.vllm_version
    # One image serves every recipe (KIMI_RECIPE at run time); its base's CUDA is baked in for K3's floor.
    served = EVERY_RECIPE if DATA.targets[target].base == "cuda" else tuple(r for r in EVERY_RECIPE if r not in NVIDIA_ONLY)
    assert attrs["Config"]["Labels"]["org.kimi-serve.recipes"] == ",".join(served)
    cuda = DATA.bases[DATA.targets[target].base].cuda
    assert f"KIMI_IMAGE_CUDA={cuda or ''}" in attrs["Config"]["Env"]
    assert (cuda or "").startswith("13.") == (DATA.targets[target].base == "cuda")


def test_summary_table_printed(built_images):
    assert "target" in built_images["_stderr"] and "added" in built_images["_stderr"]
    assert built_images["_returncode"] == 0, built_images["_stderr"][-3000:]


@pytest.mark.parametrize("target", TARGETS)
def test_launch_matches_plan_and_sigterm_reaches_vllm(built_images, docker_client, target):
    image = image_of(built_images, target)
    platform = DATA.targets[target].platform
    env = DATA.targets[target].smoke_env
    plan_out = docker_client.containers.run(image, ["plan", "--format", "json"], network_mode="none",
                                            platform=platform, remove=True, environment=env)
    env = {**NO_GPU_ENV, **env}
    plan = json.loads(plan_out)
    c = docker_client.containers.run(image, detach=True, network_mode="none", platform=platform,
                                     stop_signal="SIGTERM", environment=env)
    try:
        record = None
        deadline = time.monotonic() + 120
        while record is None and time.monotonic() < deadline:
            c.reload()
            record = read_standin_record(c.logs().decode())
            if record is None and c.status == "exited":
                break
            time.sleep(0.5)
        assert record, f"stand-in vllm never started:\n{c.logs().decode()[-3000:]}"
        # The exec'd process is exactly one process of the resolver's plan for the defaults.
        matches = [p for p in plan["processes"] if list(p["argv"]) == record["argv"]]
        assert matches, f"exec'd argv {record['argv']} is not in the plan {[p['argv'] for p in plan['processes']]}"
        proc = matches[0]
        missing = {k: v for k, v in proc["env"].items() if record["env"].get(k) != v}
        assert not missing, f"env the plan sets but vllm did not see: {missing}"
        # Nothing of the entrypoint's isolated Python leaks into vllm's environment.
        assert not any("/opt/kimi" in v for k, v in record["env"].items() if k.startswith("PYTHON")), record["env"]
        assert record["pid"] == 1, "vllm should be PID 1 (exec, no shell in between)"
        assert "--shutdown-timeout" in record["argv"], record["argv"]  # the drain budget reaches vLLM
        started = time.monotonic()
        c.stop(timeout=STOP_TIMEOUT)
        elapsed = time.monotonic() - started
        c.reload()
        code = c.attrs["State"]["ExitCode"]
        logs = c.logs().decode()
        assert "KIMI-STANDIN-SIGTERM" in logs, logs[-2000:]
        assert code == 0, f"exit code {code} (137 would mean SIGKILL after the stop timeout)"
        assert elapsed < STOP_TIMEOUT
    finally:
        c.remove(force=True)


def test_any_uid_can_run_the_default_launch(built_images, docker_client):
    target = next(n for n, t in DATA.targets.items() if not t.smoke_env and t.arch == "amd64")
    image = image_of(built_images, target)
    c = docker_client.containers.run(image, detach=True, network_mode="none", user="31337:31337",
                                     environment=NO_GPU_ENV)
    try:
        deadline = time.monotonic() + 60
        record = None
        while record is None and time.monotonic() < deadline:
            record = read_standin_record(c.logs().decode())
            time.sleep(0.5)
        assert record and record["uid"] == 31337, c.logs().decode()[-2000:]
    finally:
        c.remove(force=True)


def test_unserved_hardware_names_the_right_image(built_images, docker_client):
    target = TARGETS[0]
    image = image_of(built_images, target)
    other = next(n for n, t in DATA.targets.items() if DATA.targets[target].hardware not in t.serves)
    hw = DATA.targets[other].hardware
    c = docker_client.containers.run(image, ["print"], detach=True, network_mode="none",
                                     environment={"KIMI_HARDWARE": hw})
    try:
        code = c.wait(timeout=120)["StatusCode"]
        err = c.logs(stdout=False, stderr=True).decode()
        assert code == 2 and err.startswith("kimi-serve: error:") and hw in err, err
    finally:
        c.remove(force=True)


def test_healthcheck_command_sees_vllm_health(built_images, docker_client):
    """The image's HEALTHCHECK command answers 0 once vllm serves /health (and 1 before/without)."""
    target = next(n for n, t in DATA.targets.items() if not t.smoke_env and t.arch == "amd64")
    image = image_of(built_images, target)
    hc = docker_client.images.get(image).attrs["Config"]["Healthcheck"]["Test"]
    assert hc[0] == "CMD"
    c = docker_client.containers.run(image, detach=True, network_mode="none", environment=NO_GPU_ENV)
    try:
        deadline = time.monotonic() + 60
        while read_standin_record(c.logs().decode()) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert read_standin_record(c.logs().decode()), c.logs().decode()[-2000:]
        code, out = None, b""
        while time.monotonic() < deadline + 30:
            code, out = c.exec_run(hc[1:])
            if code == 0:
                break
            time.sleep(1)
        assert code == 0, out
        code, _ = c.exec_run(hc[1:], environment={**NO_GPU_ENV, "KIMI_PORT": "8999"})
        assert code != 0, "healthcheck must fail when nothing answers on KIMI_PORT"
    finally:
        c.remove(force=True)


@pytest.mark.parametrize("target", TARGETS)
def test_the_build_ran_download_kernels_on_the_base(built_images, docker_client, target):
    """images/Dockerfile runs `vllm download-kernels` where the base's vLLM has it (the stand-in
    base's command leaves a marker; the real one installs FlashInfer's kernels into the base's Python)."""
    image = image_of(built_images, target)
    out = docker_client.containers.run(image, entrypoint=["python3", "-c",
                                                          "print(open('/opt/kimi-standin-kernels').read())"],
                                       network_mode="none", platform=DATA.targets[target].platform, remove=True)
    assert b"download-kernels" in out
