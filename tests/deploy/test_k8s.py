"""`kimi-serve plan --format k8s`: every manifest validates, and each shape has what it needs."""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys

import pytest
import yaml

from entrypoint.app.launch import build, with_peers
from entrypoint.core.base.errors import KimiError
from entrypoint.core.data.recipe import load_catalog
from entrypoint.render import deployment, k8s, k8s_pod
from tests.deploy.k8s_schema import ROOT, validate
from tests.deploy.shapes import K8S, container_environ, documents, launch_for

SECRET = "hf_do_not_render_me_123"



def _platform_arch(hardware: str) -> str:
    """The architecture of the image that serves this hardware: its target's platform (images/targets.yaml)."""
    targets = yaml.safe_load((Path(__file__).resolve().parents[2] / "images" / "targets.yaml").read_text())["targets"]
    (platform,) = {t["platform"] for t in targets.values() if hardware in t.get("serves", [t.get("hardware")])}
    return platform.split("/")[1]

def _pod_specs(doc: dict):
    if doc["kind"] not in ("Deployment", "StatefulSet", "LeaderWorkerSet"):
        return
    spec = doc["spec"]
    if doc["kind"] in ("Deployment", "StatefulSet"):
        yield spec["template"]["spec"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key in spec.get("leaderWorkerTemplate", {}):
            yield spec["leaderWorkerTemplate"][key]["spec"]


def k8s_launch(environ):
    return launch_for("k8s", environ)


def _by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("case", sorted(K8S))
def test_every_object_validates(case):
    docs = documents("k8s", K8S[case])
    assert docs
    for doc in docs:
        validate(doc)


# How the device plugins and node labellers name GPUs (NVIDIA k8s-device-plugin and GPU Feature
# Discovery; AMD k8s-device-plugin and GPU Operator node labeller), written out by hand.
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
PRODUCT_LABEL = {"nvidia": "nvidia.com/gpu.product", "amd": "amd.com/gpu.product-name"}
PRODUCT = {"h100": "NVIDIA-H100-80GB-HBM3", "h200": "NVIDIA-H200", "b200": "NVIDIA-B200", "gb200": "NVIDIA-GB200",
           "b300": "NVIDIA-B300-SXM6-AC", "gb300": "NVIDIA-GB300", "mi300x": "AMD_Instinct_MI300X",
           "mi325x": "AMD_Instinct_MI325X", "mi350x": "AMD_Instinct_MI350X", "mi355x": "AMD_Instinct_MI355X"}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(K8S))
def test_pods_read_settings_from_env_and_the_token_from_a_secret_file(case):
    environ = {**K8S[case], "HF_TOKEN": SECRET}
    text = "".join(k8s.render(k8s_launch(environ)).values())
    assert SECRET not in text
    brand = load_catalog().hardware[K8S[case]["KIMI_HARDWARE"]].brand
    arch = _platform_arch(K8S[case]["KIMI_HARDWARE"])
    for doc in documents("k8s", environ):
        for pod in _pod_specs(doc):
            # every pod (a router, a KV helper too) on a node of its image's platform (images/targets.yaml)
            assert pod["nodeSelector"]["kubernetes.io/arch"] == arch
            assert pod["enableServiceLinks"] is False  # a Service named kimi would set KIMI_PORT=tcp://...
            container, *companions = pod["containers"]
            for side in companions:  # LMCache's server beside the engine: the same image, its own role
                side_env = {e["name"]: e.get("value") for e in side["env"]}
                assert side["name"] == side_env["KIMI_ROLE"] == "lmcache" and side["image"] == container["image"]
                assert set(side["resources"]["limits"]) == {"cpu", "memory"} and "ports" not in side
            assert "command" not in container and "args" not in container
            env = {e["name"]: e for e in container["env"]}
            rank = env.pop("KIMI_NODE_RANK", None)  # a StatefulSet's pods: their ordinal
            assert rank is None or (doc["kind"] == "StatefulSet" and rank["valueFrom"] == {
                "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}})
            # the user's settings as written, from the deployment's one ConfigMap
            assert env.pop("KIMI_CONFIG_JSON")["valueFrom"] == {
                "configMapKeyRef": {"name": k8s_pod.settings_map_name(k8s_launch(environ)), "key": "settings.json"}}
            assert "HF_TOKEN" not in env and all("valueFrom" not in e for e in env.values())
            assert env["HF_TOKEN_PATH"]["value"] == "/run/secrets/kimi-serve/hf_token"
            token = next(v for v in pod["volumes"] if v["name"] == k8s_pod.TOKEN_VOLUME)
            assert token["secret"] == {"secretName": k8s_pod.hf_token_secret(k8s_launch(environ)), "optional": True,
                                       "defaultMode": 0o440, "items": [{"key": "HF_TOKEN", "path": "hf_token"}]}
            assert env["KIMI_HARDWARE"]["value"] == K8S[case]["KIMI_HARDWARE"]
            assert not {"KIMI_NODE_RANK", "KIMI_HEAD_ADDR", "KIMI_IMAGE", "KIMI_NAMESPACE"} & set(env)
            # the deployment's name, by which each container names its peers: no pod carries their addresses
            assert (env["KIMI_NAME"]["value"], env["KIMI_PEER_NAMES"]["value"]) == (k8s_launch(environ).name, "k8s")
            assert not {"KIMI_PREFILL_ADDRS", "KIMI_DECODE_ADDRS", "KIMI_INSTANCE_ADDRS", "KIMI_MOONCAKE_MASTER_ADDR",
                        "KIMI_MOONCAKE_STORE_HOST"} & set(env)
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            scratch = {"/tmp": "tmp", "/home/kimi": "home", "/run/secrets/kimi-serve": k8s_pod.TOKEN_VOLUME}
            resources = container["resources"]
            assert resources["requests"] == resources["limits"]  # Guaranteed QoS
            assert int(resources["limits"]["cpu"]) >= 1 and resources["limits"]["memory"].endswith("Gi")
            if "KIMI_ROLE" in env and env["KIMI_ROLE"]["value"] in ("router", "master", "store"):
                assert set(resources["limits"]) == {"cpu", "memory"} and mounts == scratch
                assert "initContainers" not in pod
                continue
            init, *sidecars = pod["initContainers"]  # the weights first, into this pod's cache
            for side in sidecars:  # KIMI_PRELOAD's weight cache: a native sidecar, the same image, its own role
                side_env = {e["name"]: e.get("value") for e in side["env"]}
                assert side["name"] == side_env["KIMI_ROLE"] == "preload" and side["restartPolicy"] == "Always"
                assert side["image"] == container["image"] and GPU_RESOURCE[brand] not in side["resources"]["limits"]
            assert init["args"] == ["download"] and init["image"] == container["image"]
            assert init["env"] == container["env"] and init["securityContext"] == container["securityContext"]
            assert init["resources"]["limits"] == {k: v for k, v in resources["limits"].items() if k in ("cpu", "memory")}
            assert {m["mountPath"]: m["name"] for m in init["volumeMounts"]} == {**scratch, "/cache": k8s_pod.CACHE_VOLUME}
            gpus = resources["limits"][GPU_RESOURCE[brand]]
            assert int(gpus) >= 1
            assert pod["nodeSelector"] == {"kubernetes.io/arch": arch, PRODUCT_LABEL[brand]: PRODUCT[K8S[case]["KIMI_HARDWARE"]]}
            shm = next(v for v in pod["volumes"] if v["name"] == k8s_pod.SHM_VOLUME)
            assert shm["emptyDir"]["medium"] == "Memory"
            sockets = {"/run/weight-cache": k8s_pod.SOCKET_VOLUME} if sidecars else {}
            assert mounts == {**scratch, "/dev/shm": k8s_pod.SHM_VOLUME, "/cache": k8s_pod.CACHE_VOLUME, **sockets}


@pytest.mark.parametrize("case", sorted(K8S))
def test_serving_pods_have_probes_long_enough_for_the_load(case):
    for doc in documents("k8s", K8S[case]):
        for pod in _pod_specs(doc):
            container = pod["containers"][0]
            if [p["name"] for p in container.get("ports", [])] != ["http"]:
                continue
            startup = container["startupProbe"]
            assert startup["periodSeconds"] * startup["failureThreshold"] >= 3600  # a 600 GB load
            for probe in ("startupProbe", "livenessProbe"):
                assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
            # readiness: /health and no stop begun; the stop flips it first (issue 38)
            assert container["readinessProbe"]["exec"]["command"][:3] == ["kimi-serve", "healthcheck", "--ready"]
            assert container["lifecycle"]["preStop"]["exec"]["command"][:3] == ["kimi-serve", "drain", "--pause"]


def test_single_node_is_a_deployment_with_a_cache_claim_and_a_service():
    docs = documents("k8s", K8S["single-h200"])
    assert [d["kind"] for d in docs] == ["Namespace", "ConfigMap", "PersistentVolumeClaim", "Deployment", "Service",
                                         "NetworkPolicy", "NetworkPolicy", "NetworkPolicy"]
    pvc, dep, svc = docs[2:5]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]["spec"]
    cache = next(v for v in pod["volumes"] if v["name"] == k8s_pod.CACHE_VOLUME)
    assert cache["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert pod["containers"][0]["image"] == "ghcr.io/kimi-serve/kimi:0.33.0-h200"
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8", "cpu": "48", "memory": "896Gi"}
    assert svc["spec"]["selector"] == dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http"}]


def test_amd_pods_ask_for_amd_gpus():
    docs = documents("k8s", K8S["single-mi300x-features"])
    (dep,) = _by_kind(docs, "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["amd.com/gpu"] == "8"
    assert dep["spec"]["template"]["spec"]["securityContext"]["supplementalGroups"] == [44]  # video
    assert container["image"] == "ghcr.io/kimi-serve/kimi:0.33.0-rocm-gfx942"
    assert container_environ(docs, container)["KIMI_CONFIG_JSON"] == '{"features":"-spec_decoding","hardware":"mi300x"}'


@pytest.mark.parametrize("case", [c for c in K8S if c.startswith("multi_node")])
def test_multi_node_is_one_leaderworkerset_recreated_as_a_group(case):
    environ = K8S[case]
    (lws,), (svc,) = (_by_kind(documents("k8s", environ), kind) for kind in ("LeaderWorkerSet", "Service"))
    nodes = int(environ["KIMI_NODES"])
    assert lws["kind"] == "LeaderWorkerSet" and svc["kind"] == "Service"
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == nodes and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["replicas"] == 1
    # LeaderWorkerSet's own pod labels (leaderworkerset.x-k8s.io/v1), written here, not read from the renderer
    assert svc["spec"]["selector"]["leaderworkerset.sigs.k8s.io/name"] == lws["metadata"]["name"]
    launch = k8s_launch(environ)
    if not all(p.serves_http for p in launch.plan.processes):
        assert svc["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    env = {e["name"]: e.get("value") for e in lwt["workerTemplate"]["spec"]["containers"][0]["env"]}
    assert env["KIMI_NODES"] == str(nodes) and env["KIMI_IFACE"] == "auto"


def test_pd_cluster_pools_are_leaderworkersets_and_addresses_are_pod_dns_names():
    docs = documents("k8s", K8S["pd-h200-2x1"])
    assert [d["kind"] for d in docs] == ["Namespace", "ConfigMap", "LeaderWorkerSet", "LeaderWorkerSet", "Deployment",
                                         "Service", "NetworkPolicy", "NetworkPolicy", "NetworkPolicy"]
    prefill, decode, router, svc = docs[2:6]
    assert prefill["metadata"]["name"] == "kimi-k2-5-prefill" and decode["metadata"]["name"] == "kimi-k2-5-decode"
    assert prefill["spec"]["leaderWorkerTemplate"]["size"] == 2 and decode["spec"]["leaderWorkerTemplate"]["size"] == 1
    want = {"KIMI_PREFILL_ADDRS": "kimi-k2-5-prefill-0.kimi-k2-5-prefill,kimi-k2-5-prefill-0-1.kimi-k2-5-prefill",
            "KIMI_DECODE_ADDRS": "kimi-k2-5-decode-0.kimi-k2-5-decode"}
    for doc in docs[2:5]:  # each pod's start names its peers (KIMI_PEER_NAMES=k8s): the pools' pod DNS names
        for pod in _pod_specs(doc):
            env = container_environ(docs, pod["containers"][0])
            assert not set(want) & set(env) and {k: with_peers(env)[k] for k in want} == want
    roles = [e["value"] for e in router["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "KIMI_ROLE"]
    assert roles == ["router"]
    assert svc["spec"]["selector"] == router["spec"]["template"]["metadata"]["labels"]


def test_pd_cluster_addresses_set_by_the_user_win():
    environ = {**K8S["pd-h200"], "KIMI_PREFILL_ADDRS": "p0.example", "KIMI_DECODE_ADDRS": "d0.example"}
    launch = k8s_launch(environ)
    assert launch.settings.prefill_addrs == ("p0.example",) and launch.settings.decode_addrs == ("d0.example",)


def test_pd_cluster_on_a_shared_node_is_for_compose():
    with pytest.raises(KimiError, match="--format compose"):
        k8s.render(k8s_launch({**K8S["pd-h200"], "KIMI_PREFILL_NODES": "0", "KIMI_DECODE_NODES": "0",
                               "KIMI_SKIP_MEMORY_CHECK": "1"}))


def test_image_and_name_settings():
    environ = {**K8S["multi_node_tp-h100x2"], "KIMI_IMAGE": "registry.example/kimi:1", "KIMI_NAME": "kimi"}
    (lws,), (svc,) = (_by_kind(documents("k8s", environ), kind) for kind in ("LeaderWorkerSet", "Service"))
    assert lws["metadata"]["name"] == "kimi" and svc["metadata"]["name"] == "kimi-api"
    pod = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example/kimi:1"


def test_default_image_is_the_published_one_of_the_target():
    launch = k8s_launch({"KIMI_HARDWARE": "mi300x"})
    assert deployment.image(launch) == "ghcr.io/kimi-serve/kimi:0.33.0-rocm-gfx942"
    targets = yaml.safe_load((ROOT / "images" / "targets.yaml").read_text())
    assert {hw.image_target for hw in load_catalog().hardware.values()} <= set(targets["targets"])


def test_cli_writes_the_manifests(tmp_path):
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "KIMI_HARDWARE": "h200"}
    proc = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", "k8s", "--output", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    written = (tmp_path / k8s.FILE).read_text()
    assert written == k8s.render(k8s_launch({"KIMI_HARDWARE": "h200"}))[k8s.FILE]


@pytest.mark.parametrize("fmt", ["k8s", "compose"])
def test_secrets_in_extra_args_are_refused(fmt):
    environ = {"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": f"--max-model-len 8192 --api-key {SECRET}"}
    with pytest.raises(KimiError, match="VLLM_API_KEY"):
        documents(fmt, environ)
    assert documents(fmt, {**environ, "KIMI_EXTRA_ARGS": "--max-model-len 8192"})


@pytest.mark.parametrize("case", ["single-h200", "pd-h200-2x1", "kv-centralized-h200x3", "multi_node_tp-gb200x4"])
def test_a_changed_setting_rolls_every_pod_that_reads_it(case):
    """The settings reach the pods from a ConfigMap, which Kubernetes does not watch: each pod template
    carries the settings' checksum, so a changed setting changes every template (a rollout on
    `kubectl apply`), and the same settings change none."""
    def templates(environ):
        out = {}
        for doc in documents("k8s", environ):
            lwt = doc.get("spec", {}).get("leaderWorkerTemplate", {})
            for key, template in [("template", doc.get("spec", {}).get("template")),
                                  *[(k, lwt.get(k)) for k in ("leaderTemplate", "workerTemplate")]]:
                if template and doc["kind"] != "Job":
                    out[(doc["kind"], doc["metadata"]["name"], key)] = template["metadata"]["annotations"]
        return out

    base = templates(K8S[case])
    assert base == templates(K8S[case])  # stable
    changed = templates({**K8S[case], "KIMI_MODEL_REVISION": "v2"})
    assert set(changed) == set(base) and all(changed[k]["checksum/settings"] != base[k]["checksum/settings"]
                                                 for k in base)


def test_the_users_settings_reach_every_container_as_written(tmp_path):
    """Issue 50: the user's settings (a KIMI_CONFIG file's and the variables', the variables over the
    file) in one ConfigMap, untouched, read by every container as KIMI_CONFIG_JSON; as variables
    only what the deployment adds (the pinned choices); the renderer's own settings in neither."""
    config = tmp_path / "kimi.toml"
    config.write_text('features = "-spec_decoding"\nskip_memory_check = true\nextra_args = "--max-num-seqs 64"\n'
                      'port = 9000\nmodel = "moonshotai/Kimi-K2.5"\n')
    docs = documents("k8s", {"KIMI_HARDWARE": "h200", "KIMI_CONFIG": str(config), "KIMI_PORT": "9001",
                             "KIMI_NAME": "kimi", "KIMI_MONITORING": "1"})
    (settings,) = [d for d in _by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "kimi-settings"]
    assert settings["data"] == {"settings.json": '{"extra_args":"--max-num-seqs 64","features":"-spec_decoding",'
                                                 '"hardware":"h200","model":"moonshotai/Kimi-K2.5","port":"9001",'
                                                 '"skip_memory_check":true}'}
    assert docs[0]["kind"] == "Namespace" and docs[1] is settings  # before any pod that reads it
    (dep,) = _by_kind(docs, "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert [e["name"] for e in container["env"]] == ["KIMI_CONFIG_JSON", "KIMI_NAME", "KIMI_PEER_NAMES", "KIMI_HARDWARE",
                                                     "KIMI_STRATEGY", "HF_TOKEN_PATH"]
    environ = container_environ(docs, container)  # what the kubelet gives the container
    ours = build({**environ, "KIMI_VLLM_VERSION": "0.33.0"}).this_process()
    assert "--max-num-seqs" in ours.argv and ours.port == 9001


def test_a_kv_store_gets_stable_names_for_its_pods():
    docs = documents("k8s", K8S["kv-centralized-h200x3"])
    sets = {d["metadata"]["name"]: d for d in _by_kind(docs, "StatefulSet")}
    assert sets["kimi-k2-5-instance"]["spec"]["replicas"] == 3 and sets["kimi-k2-5-store"]["spec"]["replicas"] == 1
    headless = {d["metadata"]["name"] for d in _by_kind(docs, "Service") if d["spec"].get("clusterIP") == "None"}
    assert headless == {"kimi-k2-5-instance", "kimi-k2-5-store"}
    env = container_environ(docs, sets["kimi-k2-5-instance"]["spec"]["template"]["spec"]["containers"][0])
    env.update(with_peers(env))  # the pod's start names its peers (KIMI_PEER_NAMES=k8s)
    assert env["KIMI_INSTANCE_ADDRS"] == ",".join(f"kimi-k2-5-instance-{i}.kimi-k2-5-instance" for i in range(3))
    assert env["KIMI_MOONCAKE_STORE_HOST"] == "kimi-k2-5-store-0.kimi-k2-5-store"
    assert env["KIMI_MOONCAKE_MASTER_ADDR"] == "kimi-k2-5-master" and env["KIMI_ROLE"] == "instance"
    master = next(d for d in _by_kind(docs, "Service") if d["metadata"]["name"] == "kimi-k2-5-master")
    assert master["spec"]["ports"][0]["port"] == 50051
    api = next(d for d in _by_kind(docs, "Service") if d["metadata"]["name"] == "kimi-k2-5-api")
    assert api["spec"]["selector"]["app.kubernetes.io/component"] == "router" and api["spec"]["ports"][0]["port"] == 30080


def test_lmcache_runs_beside_the_engine_in_its_pod():
    docs = documents("k8s", K8S["kv-lmcache-h200"])
    (dep,) = _by_kind(docs, "Deployment")
    engine, server = dep["spec"]["template"]["spec"]["containers"]
    assert server["name"] == "lmcache" and {"name": "KIMI_ROLE", "value": "lmcache"} in server["env"]
    assert server["livenessProbe"]["exec"]["command"] == ["kimi-serve", "healthcheck"]
    assert '"kv_offload":"lmcache"' in container_environ(docs, engine)["KIMI_CONFIG_JSON"]
    assert container_environ(docs, engine)["KIMI_CONFIG_JSON"] == container_environ(docs, server)["KIMI_CONFIG_JSON"]


def test_multi_node_kv_instances_are_not_rendered():
    with pytest.raises(KimiError, match="LeaderWorkerSet per instance") as err:
        documents("k8s", {"KIMI_HARDWARE": "h100", "KIMI_NODES": "2", "KIMI_KV_OFFLOAD": "kv_store_distributed_mooncake"})
    assert err.value.code == "unsupported_combination"


def _containers(node):
    """Every container of every object, wherever a pod template holds it (containers, initContainers)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict) and "image" in c)
            yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


FLEETS = {"fleet-router": {"KIMI_HARDWARE": "h200", "KIMI_REPLICAS": "2"},
          "fleet-gateway": {"KIMI_HARDWARE": "h200", "KIMI_REPLICAS": "2", "KIMI_ROUTER": "gateway"}}


@pytest.mark.parametrize("case", sorted(K8S) + sorted(FLEETS))
def test_every_container_falls_back_to_its_logs_for_the_termination_message(case):
    """Issue 38: a container that refuses its settings shows why in `kubectl get pods` / `describe`,
    not only Error or CrashLoopBackOff (the entrypoint writes its refusal to /dev/termination-log;
    a crash without one leaves the last log lines)."""
    docs = documents("k8s", {**K8S, **FLEETS}[case])
    found = list(_containers(docs))
    assert found
    assert [c["name"] for c in found if c.get("terminationMessagePolicy") != "FallbackToLogsOnError"] == []


def test_the_bench_job_falls_back_to_its_logs_too():
    docs = documents("k8s-bench", {"KIMI_HARDWARE": "h200"})
    assert [c.get("terminationMessagePolicy") for c in _containers(docs)] == ["FallbackToLogsOnError"]


def test_a_pods_start_names_its_peers_where_its_settings_do_not():
    """KIMI_PEER_NAMES=k8s: a container names its peers as the deployment names its pods (its own
    LeaderWorkerSet group's, from the downward API's LWS_GROUP_INDEX); an address the user gave wins;
    another value is refused with the valid one."""
    docs = documents("k8s", K8S["pd-h200-2x1"])
    (prefill,) = (d for d in docs if d["metadata"]["name"] == "kimi-k2-5-prefill")
    env = container_environ(docs, prefill["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0])
    assert with_peers(env) == {
        "KIMI_PREFILL_ADDRS": "kimi-k2-5-prefill-0.kimi-k2-5-prefill,kimi-k2-5-prefill-0-1.kimi-k2-5-prefill",
        "KIMI_DECODE_ADDRS": "kimi-k2-5-decode-0.kimi-k2-5-decode"}
    assert with_peers({**env, "LWS_GROUP_INDEX": "3"})["KIMI_DECODE_ADDRS"] == "kimi-k2-5-decode-3.kimi-k2-5-decode"
    given = json.loads(env["KIMI_CONFIG_JSON"])
    mine = {**env, "KIMI_CONFIG_JSON": json.dumps({**given, "decode_addrs": "d0.example"})}
    assert set(with_peers(mine)) == {"KIMI_PREFILL_ADDRS"}
    assert build(mine).settings.decode_addrs == ("d0.example",)
    assert with_peers({k: v for k, v in env.items() if k != "KIMI_PEER_NAMES"}) == {}
    with pytest.raises(KimiError, match="k8s"):
        with_peers({**env, "KIMI_PEER_NAMES": "compose"})


def test_a_pods_start_log_says_which_peers_it_named():
    docs = documents("k8s", K8S["pd-h200"])
    (decode,) = (d for d in docs if d["metadata"]["name"] == "kimi-k2-5-decode")
    env = container_environ(docs, decode["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0])
    started = subprocess.run([sys.executable, "-m", "entrypoint"], capture_output=True, text=True, timeout=60, env={
        "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **env, "KIMI_DRY_RUN": "1",
        "KIMI_IFACE": "lo", "KIMI_PREFLIGHT": "off"})
    assert started.returncode == 0, started.stderr[-2000:]
    assert "cluster: KIMI_PREFILL_ADDRS=kimi-k2-5-prefill-0.kimi-k2-5-prefill (the pods of deployment kimi-k2-5" \
        in started.stderr + started.stdout
