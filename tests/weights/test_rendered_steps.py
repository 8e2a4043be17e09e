"""The download step each rendered deployment runs (Compose's one-shot service, the Kubernetes
init container) fetches the weights when run with the environment the rendering gives it."""

from __future__ import annotations

import pytest
import yaml

from entrypoint.app.deploy import deployment_launch
from entrypoint.render import docker_compose, k8s
from tests.deploy.shapes import container_environ

LWS_WORKER = {"LWS_LEADER_ADDRESS": "kimi-k2-5-0.kimi-k2-5", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}


def _compose_step(environ):
    doc = yaml.safe_load(docker_compose.render(deployment_launch(docker_compose, environ))[docker_compose.FILE])
    step = doc["services"]["kimi-k2-5-download"]
    return step["command"], {k: v for k, v in step["environment"].items() if v is not None}


def _k8s_step(environ, kind):
    docs = list(yaml.safe_load_all(k8s.render(deployment_launch(k8s, environ))[k8s.FILE]))
    doc = next(d for d in docs if d["kind"] == kind)
    spec = doc["spec"]
    pod = spec["template"]["spec"] if kind == "Deployment" else spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    (init,) = pod["initContainers"]
    return init["args"], container_environ(docs, init)


CASES = {
    "compose-single-h200": (lambda: _compose_step({"KIMI_HARDWARE": "h200"}), {}),
    "k8s-single-h200": (lambda: _k8s_step({"KIMI_HARDWARE": "h200"}, "Deployment"), {}),
    "k8s-multi-node-h100-worker": (lambda: _k8s_step({"KIMI_HARDWARE": "h100", "KIMI_NODES": "2"},
                                                     "LeaderWorkerSet"), LWS_WORKER),
    "k8s-pd-h200-prefill": (lambda: _k8s_step({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster"},
                                              "LeaderWorkerSet"), {}),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_download_step_fetches_the_weights(case, env, repos):
    main, wanted, _draft = repos
    step, runtime = CASES[case]
    args, step_env = step()
    assert args == ["download"]
    result = env.run(*args, **{**step_env, **runtime, "KIMI_CACHE_DIR": str(env.cache)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert env.fetched(main) == wanted


def _fake_vllm(tmp_path) -> str:
    """A `vllm` that prints its argv and exits 0, first on PATH: the start execs it."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "vllm").write_text('#!/bin/sh\necho "FAKE-VLLM $*"\n')
    (bindir / "vllm").chmod(0o755)
    return str(bindir)


def _sagemaker_env(environ):
    import json

    from entrypoint.render import sagemaker

    files = sagemaker.render(deployment_launch(sagemaker, environ))
    model = next(json.loads(text) for name, text in files.items() if "model" in name)
    return ["serve"], model["PrimaryContainer"]["Environment"]


def _skypilot_env(environ):
    from entrypoint.render import skypilot

    task = yaml.safe_load(next(iter(skypilot.render(deployment_launch(skypilot, environ)).values())))
    return [], {k: str(v) for k, v in task["envs"].items() if v is not None}


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sagemaker", "skypilot"])
def test_cloud_containers_fetch_the_weights_before_vllm_starts(platform, env, repos, tmp_path):
    """One container, no init step: the rendered KIMI_DOWNLOAD=1 makes the start fetch first."""
    main, wanted, _ = repos
    args, step_env = (_sagemaker_env if platform == "sagemaker" else _skypilot_env)({"KIMI_HARDWARE": "h200"})
    assert step_env["KIMI_DOWNLOAD"] == "1"
    path = f"{_fake_vllm(tmp_path)}:{env.vars['PATH']}"
    result = env.run(*args, **{**step_env, "KIMI_CACHE_DIR": str(env.cache), "KIMI_PREFLIGHT": "warn", "PATH": path})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert env.fetched(main) == wanted
    assert "files complete" in result.stderr  # then the exec: nothing runs after it
    assert result.stdout.startswith("FAKE-VLLM serve moonshotai/Kimi-K2.5")


@pytest.mark.slow
def test_the_start_skips_the_download_without_the_setting_and_in_a_dry_run(env, hub, tmp_path):
    path = f"{_fake_vllm(tmp_path)}:{env.vars['PATH']}"
    for extra in ({}, {"KIMI_DOWNLOAD": "1", "KIMI_DRY_RUN": "1"}):
        result = env.run(KIMI_PREFLIGHT="warn", PATH=path, **extra)
        assert result.returncode == 0, result.stdout + result.stderr
    assert not hub.bodies_done
