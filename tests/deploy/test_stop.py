"""How every rendered deployment stops (issue 30, docs/day2.md): each engine drains its running
requests (`--shutdown-timeout`, KIMI_DRAIN_TIMEOUT), and every rendering's grace period
(KIMI_STOP_GRACE, as given) holds the pause before SIGTERM, that drain and a margin for the exit,
for every shape; a drain it cannot hold is refused (issue 50: the chart draws the grace as given).

The expected figures are written here: the default drain (300 s), KServe's preStop pause (15 s), the
default grace (345 s: the pause, the drain and 30 s to exit).
"""

from __future__ import annotations

import re

import pytest
import yaml

from entrypoint.app.launch import build
from entrypoint.core.base.errors import INVALID_VALUE, KimiError
from entrypoint.core.compose.settings import read_settings
from entrypoint.render import docker_compose, k8s
from tests.deploy.shapes import COMPOSE, K8S, container_environ, launch_for

DRAIN = 300  # KIMI_DRAIN_TIMEOUT's default, long generations
PAUSE = 15  # the preStop pause KServe's vLLM runtime documents
GRACE = 345  # KIMI_STOP_GRACE's default: 15 + 300 + 30
ENGINE_PROGRAMS = ("vllm",)


def _pods(docs):
    """(object, pod spec) of every workload object."""
    for doc in docs:
        spec = doc.get("spec", {})
        if doc["kind"] in ("Deployment", "StatefulSet"):
            yield doc, spec["template"]["spec"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in spec.get("leaderWorkerTemplate", {}):
                yield doc, spec["leaderWorkerTemplate"][key]["spec"]


def _k8s(environ):
    return [d for text in k8s.render(launch_for("k8s", environ)).values() for d in yaml.safe_load_all(text) if d]


def _fronts(container) -> bool:
    """Whether the container takes client requests (its readiness, `kimi-serve healthcheck --ready`,
    routes them to it)."""
    return container.get("readinessProbe", {}).get("exec", {}).get("command", [])[:3] == \
        ["kimi-serve", "healthcheck", "--ready"]


def _wait(container) -> int:
    """The preStop hook's wait: `kimi-serve drain --pause N` (out of readiness first), or with
    `--through-drain` the pause and then the drain the container reads (its KIMI_DRAIN_TIMEOUT, else the
    default)."""
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:3] == ["kimi-serve", "drain", "--pause"], container["name"]
    if command[4:] == ["--through-drain"]:
        assert not _fronts(container), container["name"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        return int(command[3]) + int(env.get("KIMI_DRAIN_TIMEOUT", DRAIN))
    assert command[4:] == [] and _fronts(container), container["name"]
    return int(command[3])


def _check_pod(pod: dict, drain: int) -> None:
    grace = pod["terminationGracePeriodSeconds"]
    fronting = [c for c in pod["containers"] if _fronts(c)]
    pauses = [_wait(c) for c in fronting]
    for container in pod["containers"]:
        wait = _wait(container)
        if _fronts(container):
            assert wait == PAUSE  # out of readiness and routing, then SIGTERM
            assert "exec" in container["lifecycle"]["preStop"]  # the hook flips readiness (issue 38)
            assert grace >= wait + drain + 1, (container["name"], grace)  # pause + drain + a margin
        else:  # backs the engines (a headless worker, a KV helper, LMCache): SIGTERM once they drained
            assert wait >= PAUSE + drain, (container["name"], wait)
            assert grace >= wait + 1, (container["name"], grace)
        assert wait >= min(pauses, default=wait)
    for init in pod.get("initContainers", []):
        assert "lifecycle" not in init  # Kubernetes runs no preStop hook for a finished init container


@pytest.mark.parametrize("case", sorted(K8S))
def test_every_pod_of_every_k8s_shape_holds_pause_drain_and_margin(case):
    docs = _k8s(K8S[case])
    pods = list(_pods(docs))
    assert pods
    for _, pod in pods:
        _check_pod(pod, DRAIN)
    # the engines the pods start carry the drain (the plan the containers resolve)
    engines = [p for p in launch_for("k8s", K8S[case]).plan.processes if p.argv[0] in ENGINE_PROGRAMS]
    assert engines and all(_flag(p.argv, "--shutdown-timeout") == str(DRAIN) for p in engines)


@pytest.mark.parametrize("drain,grace", [("45", None), ("0", None), ("45", "100")])
def test_the_grace_period_is_the_setting_and_holds_the_drain(drain, grace):
    env = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_DRAIN_TIMEOUT": drain,
           **({"KIMI_STOP_GRACE": grace} if grace else {})}
    docs = _k8s(env)
    for _, pod in _pods(docs):
        _check_pod(pod, int(drain))
        assert pod["terminationGracePeriodSeconds"] == int(grace or GRACE)  # as given, never a sum
    one_node = {**env, "KIMI_STRATEGY": "single_node_tp"}  # a Compose file of one node
    services = yaml.safe_load(next(iter(docker_compose.render(launch_for("compose", one_node)).values())))["services"]
    assert {svc["stop_grace_period"] for svc in services.values() if svc.get("restart") != "no"} == {f"{grace or GRACE}s"}
    plan = launch_for("k8s", env).plan
    for proc in plan.processes:
        if proc.role == "router":
            assert "--shutdown-timeout" not in proc.argv  # vllm-router drains on SIGTERM by itself
        else:
            assert _flag(proc.argv, "--shutdown-timeout") == (drain if drain != "0" else None)
    # every container is told the setting, so the engines it starts drain as long as the pod waits
    told = {read_settings(container_environ(docs, c)).drain_timeout for _, pod in _pods(docs) for c in pod["containers"]}
    assert told == {int(drain)}


@pytest.mark.parametrize("env", [{"KIMI_DRAIN_TIMEOUT": "900"}, {"KIMI_STOP_GRACE": "344"},
                                 {"KIMI_DRAIN_TIMEOUT": "100", "KIMI_STOP_GRACE": "144"}])
def test_a_drain_the_grace_cannot_hold_is_refused_naming_the_grace_it_needs(env):
    """The kubelet (or Docker) SIGKILLs a container its grace period after the stop: a drain longer than
    the grace leaves (less the pause and the exit's margin) would be cut, its streams with it. Refused
    by the plan, so by the container, `plan --check` and the chart's hook alike, in one line."""
    need = PAUSE + int(env.get("KIMI_DRAIN_TIMEOUT", DRAIN)) + 30
    for make in (lambda: build({"KIMI_HARDWARE": "h200", **env}), lambda: _k8s({"KIMI_HARDWARE": "h200", **env})):
        with pytest.raises(KimiError) as err:
            make()
        assert err.value.code == INVALID_VALUE, err.value.message
        assert f"KIMI_STOP_GRACE={env.get('KIMI_STOP_GRACE', GRACE)} cannot hold" in err.value.message
        assert f"need {need} s. Set KIMI_STOP_GRACE={need} or more" in err.value.message
        assert "\n" not in err.value.message
    build({"KIMI_HARDWARE": "h200", **env, "KIMI_STOP_GRACE": str(need)})  # the way out it names


def test_the_users_own_shutdown_timeout_is_refused_and_the_setting_sizes_the_pod():
    """A --shutdown-timeout of the user's would drain longer than the renderings wait: refused in
    any spelling (issue 37); KIMI_DRAIN_TIMEOUT gives the engine's flag, KIMI_STOP_GRACE the pod's
    grace period."""
    for args in ("--shutdown-timeout 900", "--shutdown_timeout=900", "--shutdown-t 900"):
        with pytest.raises(KimiError) as err:
            build({"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": args})
        assert err.value.code == INVALID_VALUE and "KIMI_DRAIN_TIMEOUT" in err.value.message, args
    with pytest.raises(KimiError) as err:
        _k8s({"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": "--shutdown-timeout 900"})
    assert "KIMI_DRAIN_TIMEOUT" in err.value.message
    env = {"KIMI_HARDWARE": "h200", "KIMI_DRAIN_TIMEOUT": "900", "KIMI_STOP_GRACE": "945"}
    proc = build(env).plan.processes[0]
    assert proc.argv.count("--shutdown-timeout") == 1 and _flag(proc.argv, "--shutdown-timeout") == "900"
    assert proc.drain_s == 900
    (_, pod), = [p for p in _pods(_k8s(env))]
    assert pod["terminationGracePeriodSeconds"] == 945
    _check_pod(pod, 900)


def test_scale_down_and_rollouts_wait_longer_than_a_drain():
    docs = _k8s({"KIMI_HARDWARE": "h200", "KIMI_AUTOSCALING": "keda"})
    (_, pod), = list(_pods(docs))
    grace = pod["terminationGracePeriodSeconds"]
    scaled = next(d for d in docs if d["kind"] == "ScaledObject")["spec"]
    assert scaled["cooldownPeriod"] >= grace
    down = scaled["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": down["policies"][0]["periodSeconds"]}]
    assert down["policies"][0]["periodSeconds"] >= grace  # one copy drains before the next goes
    deployment = next(d for d in docs if d["kind"] == "Deployment")["spec"]
    assert deployment["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}  # the new copy first
    assert deployment["progressDeadlineSeconds"] >= grace
    pdb = next(d for d in docs if d["kind"] == "PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1  # a node drain evicts one copy at a time, each with its grace period


def _seconds(text: str) -> int:
    match = re.fullmatch(r"([0-9]+)s", text)
    assert match, text
    return int(match.group(1))


@pytest.mark.parametrize("case", sorted(COMPOSE))
def test_every_compose_service_is_stopped_with_sigterm_and_the_drain(case):
    services = yaml.safe_load(next(iter(docker_compose.render(launch_for("compose", COMPOSE[case])).values())))["services"]
    for name, svc in services.items():
        if svc.get("restart") == "no":  # the one-shot download: it has exited before anything serves
            continue
        assert svc["stop_signal"] == "SIGTERM", name
        assert _seconds(svc["stop_grace_period"]) >= DRAIN + 1, name  # Docker's default would be 10 s


def _flag(argv, flag):
    argv = list(argv)
    return argv[argv.index(flag) + 1] if flag in argv else None
