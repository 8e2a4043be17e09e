"""Simulate the pods of the rendered manifests: run the entrypoint once per pod with the env that
pod gets (its KIMI_* env from the manifest plus the LWS_* variables LeaderWorkerSet injects) and
check that the launches are exactly the processes of `kimi-serve plan`, one pod per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from entrypoint.core.compose.select import select
from entrypoint.core.compose.settings import read_settings
from entrypoint.core.data.recipe import load_catalog, with_recipe
from entrypoint.node.cluster import default_route_iface
from entrypoint.render import k8s
from tests.deploy.shapes import K8S, container_environ, deployment_name, documents

NAMESPACE = "serving"
CASES = sorted(K8S)


def _kimi(args, env):
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    proc = subprocess.run([sys.executable, "-m", "entrypoint", *args], env={**base, **env}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, f"kimi-serve {' '.join(args)} failed:\n{proc.stderr}"
    return json.loads(proc.stdout)


def _container_env(docs, pod_spec: dict, container: int = 0) -> dict:
    # the downward API's entries (a StatefulSet pod's rank) are filled in by pods()
    return container_environ(docs, pod_spec["containers"][container])


def _leader_address(lws: str) -> str:
    return f"{lws}-0.{lws}.{NAMESPACE}"  # what LWS puts in LWS_LEADER_ADDRESS


def pods(docs):
    """(env the pod's container starts with, its group position) for every pod the objects create."""
    for doc in docs:
        if doc["kind"] == "LeaderWorkerSet":
            name, lwt = doc["metadata"]["name"], doc["spec"]["leaderWorkerTemplate"]
            for index in range(lwt["size"]):
                template = lwt.get("leaderTemplate", lwt["workerTemplate"]) if index == 0 else lwt["workerTemplate"]
                lws_env = {"LWS_LEADER_ADDRESS": _leader_address(name), "LWS_GROUP_SIZE": str(lwt["size"]),
                           "LWS_WORKER_INDEX": str(index), "LWS_NAME": name, "LWS_GROUP_INDEX": "0"}
                yield {**_container_env(docs, template["spec"]), **lws_env}, index
        elif doc["kind"] == "Deployment":  # every container: LMCache's server beside the engine
            spec = doc["spec"]["template"]["spec"]
            for container in range(len(spec["containers"])):
                yield _container_env(docs, spec, container), 0
            for init in spec.get("initContainers", []):  # a native sidecar: KIMI_PRELOAD's weight cache
                if init.get("restartPolicy") == "Always":
                    yield container_environ(docs, init), 0
        elif doc["kind"] == "StatefulSet":  # a KV store's store and instances: KIMI_NODE_RANK = the pod's ordinal
            for index in range(doc["spec"]["replicas"]):
                yield {**_container_env(docs, doc["spec"]["template"]["spec"]), "KIMI_NODE_RANK": str(index)}, index


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_each_pod_launches_its_process_of_the_plan(case):
    iface = default_route_iface()
    if iface is None:
        pytest.skip("no default route here: pods resolve KIMI_IFACE=auto from theirs")
    environ = K8S[case]
    settings = read_settings(environ)
    render_env = k8s.deployment_environ(environ, settings, select(settings, with_recipe(load_catalog(), settings.recipe)))
    # The plan as the pods see it: the interface `auto` finds, and the head address LWS gives.
    plan_env = {**render_env, "KIMI_IFACE": iface}
    if "KIMI_HEAD_ADDR" in render_env:
        plan_env["KIMI_HEAD_ADDR"] = _leader_address(k8s.lws_name(deployment_name(render_env)))
    plan = _kimi(["plan", "--format", "json"], plan_env)["processes"]
    launched = []
    for pod_env, index in pods(documents("k8s", environ)):
        got = _kimi(["print", "--format", "json"], pod_env)
        role = pod_env.get("KIMI_ROLE")
        want = next(p for p in plan if (p["role"] == role and p["rank"] == (0 if role == "router" else index))
                    or (role is None and p["rank"] == index))
        assert got["argv"] == want["argv"], f"{case}: pod {role or 'node'} {index}"
        assert got["env"] == {k: v for k, v in want["env"].items() if k not in pod_env}
        launched.append((want["role"], want["rank"]))
    assert sorted(launched) == sorted((p["role"], p["rank"]) for p in plan)
