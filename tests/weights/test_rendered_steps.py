"""The download step each rendered deployment runs (Compose's one-shot service, the Kubernetes
init container) fetches the weights when run with the environment the rendering gives it."""

from __future__ import annotations

import pytest
import yaml

from entrypoint.app import deployment_launch
from entrypoint.render import compose, k8s

LWS_WORKER = {"LWS_LEADER_ADDRESS": "kimi-k2-5-0.kimi-k2-5", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}


def _compose_step(environ):
    doc = yaml.safe_load(compose.render(deployment_launch(compose, environ))[compose.FILE])
    step = doc["services"]["kimi-k2-5-download"]
    return step["command"], {k: v for k, v in step["environment"].items() if v is not None}


def _k8s_step(environ, kind):
    docs = list(yaml.safe_load_all(k8s.render(deployment_launch(k8s, environ))[k8s.FILE]))
    doc = next(d for d in docs if d["kind"] == kind)
    spec = doc["spec"]
    pod = spec["template"]["spec"] if kind == "Deployment" else spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    (init,) = pod["initContainers"]
    return init["args"], {e["name"]: e["value"] for e in init["env"] if "value" in e}


CASES = {
    "compose-single-h200": (lambda: _compose_step({"KIMI_HARDWARE": "h200"}), {}),
    "k8s-single-h200": (lambda: _k8s_step({"KIMI_HARDWARE": "h200"}, "Deployment"), {}),
    "k8s-multi-node-h100-worker": (lambda: _k8s_step({"KIMI_HARDWARE": "h100", "KIMI_NODES": "2"},
                                                     "LeaderWorkerSet"), LWS_WORKER),
    "k8s-pd-h200-prefill": (lambda: _k8s_step({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster"},
                                              "LeaderWorkerSet"), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_download_step_fetches_the_weights(case, env, repos):
    main, wanted, draft = repos
    step, runtime = CASES[case]
    args, step_env = step()
    assert args == ["download"]
    result = env.run(*args, **{**step_env, **runtime, "KIMI_CACHE_DIR": str(env.cache)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert env.fetched(main) == wanted
