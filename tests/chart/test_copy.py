"""buildsys/chart_copy.py: plan's objects the chart copies, each varying value a placeholder, and the
proof each copy gets when it is generated (filled with a second probe's values, it must be that
probe's rendering). Hand-written objects in the shapes plan renders (render/autoscaling.py)."""

from __future__ import annotations

import pytest

from buildsys.chart_copy import fill, placeheld, proven

PROBE = {"name": "probe-release-x", "namespace": "probe-ns-x", "replicas": 3, "scale_waiting": 4093,
         "pod_labels": {"app.kubernetes.io/name": "probe-release-x"}}
OTHER = {"name": "other-release-y", "namespace": "other-ns-y", "replicas": 2, "scale_waiting": 12,
         "pod_labels": {"app.kubernetes.io/name": "other-release-y"}}


def _scaler(v: dict) -> list:
    return [{"kind": "ScaledObject", "metadata": {"name": v["name"], "namespace": v["namespace"]},
             "spec": {"minReplicaCount": v["replicas"], "pollingInterval": 30,
                      "triggers": [{"metadata": {"query": f'sum(waiting{{namespace="{v["namespace"]}"}})',
                                                 "threshold": str(v["scale_waiting"])}}]}},
            {"kind": "PodDisruptionBudget", "spec": {"selector": {"matchLabels": v["pod_labels"]}}}]


def test_a_copy_holds_placeholders_and_fills_to_another_probes_objects():
    copy = placeheld(_scaler(PROBE), PROBE)
    assert copy[0]["spec"]["minReplicaCount"] == "@{replicas}"  # a whole value
    assert copy[0]["spec"]["triggers"][0]["metadata"] == {"query": 'sum(waiting{namespace="${namespace}"})',
                                                          "threshold": "${scale_waiting}"}  # parts of strings
    assert copy[1]["spec"]["selector"]["matchLabels"] == "@{pod_labels}"
    assert copy[0]["spec"]["pollingInterval"] == 30  # a constant stays
    assert fill(copy, OTHER) == _scaler(OTHER)
    assert proven(_scaler(PROBE), PROBE, _scaler(OTHER), OTHER) == copy


def test_a_constant_that_equals_a_probes_value_fails_the_proof():
    """pollingInterval 30 with a probe of 30 replicas: the copy would fill the constant with the copies."""
    probe = {**PROBE, "replicas": 30}
    with pytest.raises(AssertionError, match="does not fill"):
        proven(_scaler(probe), probe, _scaler(OTHER), OTHER)


def test_a_hollowed_pod_filled_with_its_own_values_is_plans_pod_without_its_claim():
    """chart_copy._hollow (the table's pods): a pod template plan renders (`plan --format k8s`, a single
    node with LMCache's server beside the engine), its slots filled with the pod's own values, is that pod
    but for the cache claim's volume, which the chart adds: the hollowing loses nothing else."""
    from buildsys.chart import _launch
    from buildsys.chart_copy import _hollow, probe, rendered

    launch = probe(_launch, {"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "lmcache"}, "rel", "ns")
    (pod,) = [o["spec"]["template"] for o in rendered(launch) if o["kind"] == "Deployment"]
    spec = pod["spec"]
    server, companion = spec["containers"]
    (download,) = spec["initContainers"]
    (token,) = [v for v in spec["volumes"] if "secret" in v]
    values = {**{k: pod["metadata"][k] for k in ("labels", "annotations")}, "grace": spec["terminationGracePeriodSeconds"],
              "pod_security": spec["securityContext"], "node_selector": spec["nodeSelector"], "image": server["image"],
              "pull_policy": server["imagePullPolicy"], "env": server["env"], **server["resources"],
              **{f"download_{k}": v for k, v in download["resources"].items()}, "companion_env": companion["env"],
              "failure_threshold": server["startupProbe"]["failureThreshold"], "token_secret": token["secret"]["secretName"],
              "token_key": token["secret"]["items"][0]["key"]}
    hollow = _hollow(pod)
    assert "@{env}" in str(hollow) and server["image"] not in str(hollow)
    assert fill(hollow, values) == {**pod, "spec": {**spec, "volumes": [v for v in spec["volumes"] if "persistentVolumeClaim" not in v]}}
