"""charts/kimi-serve: the real helm renders, for the same settings, exactly the objects
`kimi-serve plan --format k8s` renders (single node, multi-node, PD, KV stores and LMCache;
monitoring and autoscaling on and off); `helm lint --strict` is clean; values.schema.json refuses unknown keys and bad values;
the chart's generated files are current; every rendered object validates."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from tests.chart.helm import (CHART, RELEASE, RELEASE_NAMESPACE, chart_refusal, check_hook, hook_config, hook_env,
                              is_hook, release_template, run, template, template_many)
from tests.deploy.k8s_schema import validate
from tests.deploy.shapes import documents

DIGEST = "sha256:" + "ab" * 32
# name -> (the KIMI_CONFIG file's keys, the operating settings as KIMI_* (plan) and as chart values)
CASES = {
    "single-h200": ({"hardware": "h200"}, {}, {}),
    # KIMI_PRELOAD: `vllm preload` as the engine pod's native sidecar (render/k8s_pod.add_weight_cache)
    "single-h200-preload": ({"hardware": "h200", "preload": True, "vllm_version": "0.32.0"}, {}, {}),
    # extra_args as one shell line, quoting and tabs among its words: handed to the containers as written
    "single-h200-shell-line": ({"hardware": "h200", "strategy": "single_node_tp", "load_format": "auto", "port": 9000,
                                "extra_args": "--max-num-seqs\t32 --chat-template '{{ a }}'\"'\"'s'"}, {}, {}),
    "single-mi300x-port-features": ({"hardware": "mi300x", "features": "-spec_decoding", "name": "kimi", "port": 9000,
                                     "extra_args": "--max-num-seqs 64", "skip_memory_check": True}, {}, {}),
    "single-h200-by-digest": ({"hardware": "h200", "image": f"registry.example/kimi@{DIGEST}",
                               "namespace": "serving"}, {}, {}),
    # issue 30: the image pinned by settings.image_digest, and a drain budget of its own (grace, preStop)
    "pd-h200-digest-drain": ({"hardware": "h200", "strategy": "pd_cluster", "image_digest": DIGEST,
                              "drain_timeout": 45}, {}, {}),
    "multi_node_tp-h100x2": ({"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2}, {}, {}),
    "multi_node_dep-gb200x4": ({"hardware": "gb200", "strategy": "multi_node_dep", "nodes": 4}, {}, {}),
    "multi_node_tp_pp-mi355x-default-strategy": ({"hardware": "mi355x", "nodes": 3}, {}, {}),
    "pd-h200": ({"hardware": "h200", "strategy": "pd_cluster"}, {}, {}),
    "k3-multi_node_tp_dp-h200x2": ({"recipe": "kimi-k3", "hardware": "h200", "strategy": "multi_node_tp_dp",
                                    "nodes": 2}, {}, {}),
    "k3-pd-b300-derived-pools": ({"recipe": "kimi-k3", "hardware": "b300", "strategy": "pd_cluster"}, {}, {}),
    "k2-instruct-single-mi355x": ({"recipe": "kimi-k2-instruct", "hardware": "mi355x"}, {}, {}),
    "k2.7-code-multi-gb200x4-operated": (
        {"recipe": "kimi-k2.7-code", "hardware": "gb200", "nodes": 4},
        {"KIMI_MONITORING": "1", "KIMI_AUTOSCALING": "keda"},
        {"monitoring": {"enabled": True}, "autoscaling": {"enabled": True, "engine": "keda"}}),
    "pd-b200-port-lists-bools": ({"hardware": "b200", "strategy": "pd_cluster", "port": 9000, "download": True,
                                  "dry_run": False, "decode_parallelism": "tep", "decode_nodes": 2,
                                  "model_revision": "main", "served_model_name": "kimi"}, {}, {}),
    "multi_node_tp-h200x2-addrs-list": ({"hardware": "h200", "strategy": "multi_node_tp", "nodes": 2,
                                         "prefill_addrs": ["a", "b"], "vllm_version": "0.19.1"}, {}, {}),
    # a profile that needs a variant other than the default, with it (seed 1111 of a local sweep: the chart refused it)
    "k2.5-mi355x-mxfp4-aiter-profile": ({"hardware": "mi355x", "variant": "mxfp4", "profile": "aiter-mxfp4"}, {}, {}),
    # a release the chart has no key for, past one a recipe refuses (its class: select.version_classes)
    "kimi-linear-h200-vllm-0.19.1": ({"recipe": "kimi-linear-48b-a3b-instruct", "hardware": "h200",
                                      "vllm_version": "0.19.1"}, {}, {}),
    "pd-h200-2x1-tp": ({"hardware": "h200", "strategy": "pd_cluster", "prefill_nodes": 2, "decode_nodes": 1,
                        "prefill_parallelism": "tp", "router_port": 8080}, {}, {}),
    "single-h200-operated-keda": (
        {"hardware": "h200", "router": "none"},
        # KIMI_ROUTER=none: the copies behind the plain Service, as the chart draws them (a fleet's router: docs/fleet.md)
        {"KIMI_MONITORING": "1", "KIMI_AUTOSCALING": "keda", "KIMI_REPLICAS": "2", "KIMI_MAX_REPLICAS": "6", "KIMI_ROUTER": "none",
         "KIMI_SLO_TTFT_MS": "1500", "KIMI_SCALE_WAITING": "4"},
        {"replicas": 2, "monitoring": {"enabled": True, "sloTtftMs": 1500},
         "autoscaling": {"enabled": True, "engine": "keda", "maxReplicas": 6, "waitingPerReplica": 4}}),
    "multi_node_tp-b200x2-operated-hpa": (
        {"hardware": "b200", "strategy": "multi_node_tp", "nodes": 2},
        {"KIMI_MONITORING": "1", "KIMI_AUTOSCALING": "hpa", "KIMI_SCALE_KV_PERCENT": "70", "KIMI_SLO_ITL_MS": "50"},
        {"monitoring": {"enabled": True, "sloItlMs": 50}, "autoscaling": {"enabled": True, "engine": "hpa",
                                                                          "kvCachePercent": 70}}),
    "pd-mi355x-2x2-operated-keda": (
        {"hardware": "mi355x", "strategy": "pd_cluster", "prefill_nodes": 2, "decode_nodes": 2},
        {"KIMI_MONITORING": "1", "KIMI_AUTOSCALING": "keda", "KIMI_PROMETHEUS_URL": "http://prom.obs:9090"},
        {"monitoring": {"enabled": True}, "autoscaling": {"enabled": True, "engine": "keda",
                                                          "prometheusUrl": "http://prom.obs:9090"}}),
    # KV offload (docs/kv-cache.md): Mooncake stores (master, store, instances, router), LMCache's sidecar
    "kv-centralized-h200": ({"hardware": "h200", "kv_offload": "kv_store_centralized_mooncake"}, {}, {}),
    "kv-distributed-b200": ({"hardware": "b200", "kv_offload": "kv_store_distributed_mooncake"}, {}, {}),
    "kv-lmcache-h200": ({"hardware": "h200", "kv_offload": "lmcache"}, {}, {}),
    "kv-centralized-h200x3-addrs-router-port-operated": (
        {"hardware": "h200", "kv_offload": "kv_store_centralized_mooncake", "kv_instances": 3, "router_port": 9090,
         "mooncake_device_name": "mlx5_0", "image": f"registry.example/kimi@{DIGEST}"},
        {"KIMI_MONITORING": "1"}, {"monitoring": {"enabled": True}}),
    "kv-centralized-pd-h200": ({"hardware": "h200", "strategy": "pd_cluster", "kv_offload": "kv_store_centralized_mooncake"},
                               {}, {}),
    "kv-distributed-pd-b200-2x1-monitored": (
        {"hardware": "b200", "strategy": "pd_cluster", "prefill_nodes": 2, "decode_nodes": 1,
         "kv_offload": "kv_store_distributed_mooncake"},
        {"KIMI_MONITORING": "1"}, {"monitoring": {"enabled": True}}),
    # an autoscaled PD cluster of one unit: a PD fleet (each group a unit the PD router discovers)
    "pd-h200-autoscaled-keda": ({"hardware": "h200", "strategy": "pd_cluster"}, {"KIMI_AUTOSCALING": "keda"},
                                {"autoscaling": {"enabled": True, "engine": "keda"}}),
    "kv-simple-multi_node_tp-h100x2": ({"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2,
                                        "kv_offload": "simple"}, {}, {}),
    # fleets (docs/fleet.md): the copies behind vllm-router (its RBAC; with monitoring its PodMonitor and
    # NetworkPolicy; the autoscaler on the fleet's queue) or behind a Gateway's InferencePool and endpoint picker
    "fleet-single-h200x3-monitored-keda": (
        {"hardware": "h200"}, {"KIMI_REPLICAS": "3", "KIMI_MONITORING": "1", "KIMI_AUTOSCALING": "keda"},
        {"replicas": 3, "monitoring": {"enabled": True}, "autoscaling": {"enabled": True, "engine": "keda"}}),
    "fleet-multi_node_tp-h100x2-round_robin-port-hpa": (
        {"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2, "router_policy": "round_robin",
         "router_port": 8088, "name": "kimi", "namespace": "llm", "head_addr": "10.0.0.9"},
        {"KIMI_REPLICAS": "2", "KIMI_AUTOSCALING": "hpa"},
        {"replicas": 2, "autoscaling": {"enabled": True, "engine": "hpa"}}),
    "fleet-k3-multi_node_tp_dp-h200x2-monitored": (
        {"recipe": "kimi-k3", "hardware": "h200", "strategy": "multi_node_tp_dp", "nodes": 2},
        {"KIMI_REPLICAS": "2", "KIMI_MONITORING": "1"}, {"replicas": 2, "monitoring": {"enabled": True}}),
    # the stream front asks for a fleet even of one copy, and puts a PD cluster of one unit behind it
    "fleet-stream-front-single-h200": ({"hardware": "h200", "stream_front": "on"}, {}, {}),
    "fleet-stream-front-pd-h200": ({"hardware": "h200", "strategy": "pd_cluster", "stream_front": "on"}, {}, {}),
    "fleet-lmcache-h200x2": ({"hardware": "h200", "kv_offload": "lmcache"}, {"KIMI_REPLICAS": "2"}, {"replicas": 2}),
    "fleet-h200x2-role-router": ({"hardware": "h200", "role": "router"}, {"KIMI_REPLICAS": "2"}, {"replicas": 2}),
    "fleet-gateway-h200x2-monitored": (
        {"hardware": "h200", "router": "gateway"}, {"KIMI_REPLICAS": "2", "KIMI_MONITORING": "1"},
        {"replicas": 2, "monitoring": {"enabled": True}}),
    "fleet-gateway-multi_node_tp-h100x2-keda": (
        {"hardware": "h100", "strategy": "multi_node_tp", "nodes": 2, "router": "gateway"},
        {"KIMI_REPLICAS": "2", "KIMI_AUTOSCALING": "keda"}, {"replicas": 2, "autoscaling": {"enabled": True}}),
    "multi_node_dep-h200x2-monitored": (
        {"hardware": "h200", "strategy": "multi_node_dep", "nodes": 2}, {"KIMI_MONITORING": "1"},
        {"monitoring": {"enabled": True}}),
}


def _toml(settings: dict) -> str:
    def value(v):
        return ("true" if v else "false") if isinstance(v, bool) else str(v) if isinstance(v, int) else json.dumps(v)

    return "".join(f"{k} = {value(v)}\n" for k, v in settings.items())


def plan_objects(settings: dict, operate: dict, tmp_path) -> list:
    """plan's objects for the settings, named and placed as the release names and places them
    (settings.name / settings.namespace where set), without the Namespace (the release's own)."""
    config = tmp_path / "kimi.toml"
    config.write_text(_toml({"name": RELEASE, "namespace": RELEASE_NAMESPACE, **settings}))
    return [d for d in documents("k8s", {"KIMI_CONFIG": str(config), **operate}) if d["kind"] != "Namespace"]


def chart_objects(helm, settings: dict, values: dict, tmp_path) -> list:
    return release_template(helm, {"settings": settings, **values}, tmp_path)


def _diff(a, b, path="") -> list:
    """Where two objects differ, as paths (for the failure message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in _diff(a.get(k, "<absent>"), b.get(k, "<absent>"),
                                                                              f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: chart {a!r} != plan {b!r}"[:400]]


def _keyed(objects: list) -> dict:
    keyed = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind share a name"
    return keyed


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_chart_renders_the_objects_plan_renders(helm, case, tmp_path):
    settings, operate, values = CASES[case]
    planned, charted = _keyed(plan_objects(settings, operate, tmp_path)), _keyed(chart_objects(helm, settings, values, tmp_path))
    assert sorted(charted) == sorted(planned)
    for key, obj in planned.items():
        assert charted[key] == obj, f"{key} differs:\n" + "\n".join(_diff(charted[key], obj)[:20])


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_chart_object_validates(helm, case, tmp_path):
    settings, _, values = CASES[case]
    objects = chart_objects(helm, settings, values, tmp_path)
    kinds = {o["kind"] for o in objects}
    assert "Service" in kinds and kinds & {"Deployment", "LeaderWorkerSet"}
    if values.get("monitoring", {}).get("enabled"):
        assert {"PodMonitor", "PrometheusRule", "ConfigMap"} <= kinds
    for obj in objects:
        validate(obj)


@pytest.mark.parametrize("values", sorted(p.name for p in (CHART / "ci").glob("*-values.yaml")))
def test_lint_strict_is_clean_for_every_shape(helm, values):
    """The chart's own example values (ci/: one node, multi-node, PD, another recipe, fleets)."""
    done = run(helm, "lint", "--strict", str(CHART), "-f", str(CHART / "ci" / values))
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


@pytest.mark.slow
def test_the_example_values_cover_every_shape(helm, tmp_path):
    kinds = set()
    for values in sorted((CHART / "ci").glob("*-values.yaml")):
        objects = run(helm, "template", "kimi", str(CHART), "-f", str(values)).stdout
        kinds |= {(o["kind"], o["metadata"]["labels"].get("app.kubernetes.io/component"))
                  for o in yaml.safe_load_all(objects) if o}
    assert {("Deployment", "single"), ("LeaderWorkerSet", "head"), ("LeaderWorkerSet", "prefill"),
            ("Deployment", "router"), ("ScaledObject", "head"), ("HorizontalPodAutoscaler", "decode"),
            ("PodMonitor", "monitoring"), ("StatefulSet", "store"), ("StatefulSet", "instance"),
            ("Deployment", "master"), ("Role", "router"), ("InferencePool", "pool"), ("Deployment", "epp")} <= kinds


@pytest.mark.parametrize("values, why", [
    ({"settings": {"hardware": "h200", "nodez": 2}}, "nodez"),                       # not a KIMI_CONFIG key
    ({"settings": {"hardware": "h900"}}, "/settings/hardware"),                                    # no such hardware
    ({"settings": {"hardware": "h200", "nodes": 0}}, "minimum"),                     # below KIMI_NODES' bound
    ({"settings": {"hardware": "h200", "nodes": 257}}, "maximum"),                   # above it
    ({"settings": {"hardware": "h200", "preflight": "maybe"}}, "/settings/preflight"),             # not a choice
    ({"settings": {"hardware": "h200", "profile": "flydls"}}, "/settings/profile"),   # no recipe has that profile
    ({"settings": {"hardware": "h200", "name": "Kimi_K2"}}, "does not match"),       # not a DNS label
    ({"settings": {"hardware": "h200", "monitoring": True}}, "monitoring"),          # a chart value, not a setting
    ({"settings": {"hardware": "h200"}, "replicaz": 2}, "replicaz"),                 # unknown chart value
    ({"settings": {"hardware": "h200"}, "autoscaling": {"enabled": True, "engine": "vpa"}}, "/autoscaling/engine"),
    ({"settings": {}}, "hardware"),                                                  # hardware is required
    ({"settings": {"hardware": "h200"}, "extraEnv": [{"name": "KIMI_NODES", "value": "2"}]}, "/extraEnv/0/name"),
    # a name the chart gives its containers already: a duplicate key server-side apply refuses
    ({"settings": {"hardware": "h200"}, "extraEnv": [{"name": "HF_TOKEN_PATH", "value": "/x"}]}, "/extraEnv/0/name"),
])
def test_schema_refuses_unknown_keys_and_bad_values(helm, tmp_path, values, why):
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    done = run(helm, "template", "kimi", str(CHART), "-f", str(path), check=False)
    assert done.returncode != 0
    assert why in done.stderr, done.stderr


@pytest.mark.parametrize("settings, why", [
    ({"hardware": "h200", "strategy": "multi_node_tp", "nodes": 1}, "KIMI_IFACE is required"),  # plan's words
    ({"hardware": "h200", "strategy": "multi_node_tp_dp", "nodes": 2}, "recipe offers on h200"),
    ({"hardware": "h200", "strategy": "pd_cluster", "prefill_nodes": 0, "skip_memory_check": True}, "A pool of 0 nodes"),
    ({"hardware": "h200", "extra_args": "--max-num-seqs 8 --api-key sk-abc"}, "/settings/extra_args"),  # the schema
    # KV offload: the gates of core/compose/kv.py and render/k8s_kv.py, and what the chart does not draw
    ({"hardware": "h200", "kv_offload": "kv_store_mooncake"}, "KIMI_KV_OFFLOAD='kv_store_mooncake' is not known"),
    ({"hardware": "h200", "kv_offload": "offloading_cpu"}, "verified run"),
    ({"hardware": "h200", "strategy": "pd_cluster", "kv_offload": "lmcache"}, "does not compose with KIMI_STRATEGY=pd_cluster"),
    ({"hardware": "h200", "strategy": "multi_node_tp", "nodes": 2, "kv_offload": "kv_store_centralized_mooncake"},
     "does not draw yet"),
    ({"hardware": "h200", "strategy": "pd_cluster", "kv_offload": "kv_store_centralized_mooncake", "kv_instances": 2},
     "does not apply to KIMI_STRATEGY=pd_cluster"),
    ({"hardware": "h200", "kv_offload": "simple", "kv_instances": 2}, "configure a KV store"),
    ({"hardware": "h200", "kv_offload": "kv_store_distributed_mooncake", "vllm_version": "0.19.1"}, "needs vLLM >= 0.21.0"),
    ({"hardware": "h200", "kv_offload": "lmcache", "extra_args": "--kv-transfer-config {}"}, "--kv-transfer-config"),
    # KIMI_PRELOAD on a release without `vllm preload` evidence, and on AMD (no second container sees the GPUs)
    ({"hardware": "h200", "preload": True}, "no evidence of `vllm preload` for vLLM"),
    ({"hardware": "mi300x", "preload": True, "vllm_version": "0.32.0"}, "cannot see AMD GPUs"),
])
def test_chart_refuses_what_plan_refuses(helm, tmp_path, settings, why):
    """Refused at render (the schema) or by the chart's pre-install check, in plan's words."""
    refusal = chart_refusal(helm, {"settings": settings}, tmp_path)
    assert refusal is not None and why in refusal, refusal


_K3_PD = {"recipe": "kimi-k3", "strategy": "pd_cluster"}


@pytest.mark.parametrize("settings, message", [
    # a pool under the recipe's GPU floor for its layout (CI seed 1796159359 found the chart rendering it)
    ({**_K3_PD, "hardware": "mi355x", "nodes": 2, "decode_nodes": 1},
     "The decode pool spans 8 x mi355x GPUs, but the Kimi-K3 recipe runs a dep layout on at least 16 "
     "(strategy_min_gpus). Set KIMI_DECODE_NODES=2."),
    # a layout the recipe marks unsupported on this hardware
    ({**_K3_PD, "hardware": "h200", "prefill_nodes": 1, "skip_memory_check": True},
     "The decode pool's dep layout: the Kimi-K3 recipe marks multi_node_dep unsupported on h200. "
     "Set KIMI_DECODE_PARALLELISM to tp or tep."),
    # a tensor-parallel layout that would run another TP than the recipe's pool TP
    ({**_K3_PD, "hardware": "mi355x", "prefill_nodes": 2},
     "The Kimi-K3 recipe gives the prefill pool tensor parallel size 8, but its tep layout spans 16 x mi355x GPUs "
     "and would run TP 16, not what the recipe means. Use KIMI_PREFILL_PARALLELISM=dep (TP 8 per data-parallel "
     "rank) or KIMI_PREFILL_NODES=1 if the model fits."),
    # a data-parallel rank wider than a node (CI seed 88 of a local sweep: the chart rendered it)
    ({**_K3_PD, "hardware": "gb300", "variant": "nvfp4", "prefill_parallelism": "dep"},
     "The Kimi-K3 recipe gives the prefill pool tensor parallel size 8 per data-parallel rank, but its dep layout "
     "keeps each rank on one node and a gb300 node gives the pool 4 GPUs. Use KIMI_PREFILL_PARALLELISM=tep with "
     "KIMI_PREFILL_NODES=2 or KIMI_PREFILL_PARALLELISM=tp with KIMI_PREFILL_NODES=2."),
    ({**_K3_PD, "hardware": "b200", "prefill_nodes": 1, "decode_parallelism": "tep", "decode_nodes": 1},
     "The Kimi-K3 recipe gives the decode pool tensor parallel size 1, but its tep layout spans 8 x b200 GPUs and "
     "would run TP 8, not what the recipe means. Use KIMI_DECODE_PARALLELISM=dep (TP 1 per data-parallel rank)."),
    # a release without its own grammar is judged by the newest recorded one not newer (vllm_cli.spec_for):
    # 0.19.1's lacks the flag the recipe's strategy override names (seed 303 of a local sweep: the chart rendered it)
    ({"recipe": "kimi-k2-instruct", "hardware": "b300", "strategy": "multi_node_tp_pp", "nodes": 3, "vllm_version": "0.30.0"},
     "--disable-log-requests is not an option of `vllm serve` in vLLM 0.19.1. Did you mean --enable-log-requests? "
     "(from the recipe: strategy override)"),
    # a release under the recipe's floor that the chart has no table key for, spelled as plan reads it (v, no v)
    ({"recipe": "kimi-k3", "hardware": "b200", "vllm_version": "0.27.0"},
     "KIMI_VLLM_VERSION=0.27.0: the Kimi-K3 recipe needs vLLM >= 0.27.1. It runs on vLLM >= 0.27.1: use an image "
     "built on vLLM 0.32.0, 0.33.0, 0.34.0 (the default tags; <vllm>-<target> for another release), or another KIMI_RECIPE."),
    ({"hardware": "h200", "vllm_version": "latest"},
     "KIMI_VLLM_VERSION='latest' is not a vLLM release like 0.34.0. Supported: 0.19.1, 0.32.0, 0.33.0, 0.34.0."),
    # a profile without the variant it needs
    ({"hardware": "mi355x", "profile": "aiter-mxfp4"},
     "KIMI_PROFILE=aiter-mxfp4 (Tuned AITER MXFP4 (RadeonFlow) MoE path with fused shared experts; TP4 or TP8) "
     "needs variant mxfp4; KIMI_VARIANT=default. Drop KIMI_PROFILE or change KIMI_VARIANT."),
    # a profile's floor, and past it a release whose grammar lacks the profile's choice
    ({"recipe": "kimi-k2.5", "hardware": "mi355x", "profile": "flydsl", "vllm_version": "0.22.0"},
     "KIMI_PROFILE=flydsl needs vLLM >= 0.24.0, but the launch is for vLLM 0.22.0 (KIMI_VLLM_VERSION, or the "
     "image's vLLM). Run an image built on vLLM >= 0.24.0 (the default tags), or drop KIMI_PROFILE."),
    ({"recipe": "kimi-k2.5", "hardware": "mi355x", "profile": "flydsl", "vllm_version": "0.24.1"},
     "--moe-backend 'flydsl' is not accepted by vLLM 0.19.1; it takes one of: aiter, auto, cutlass, deep_gemm, "
     "flashinfer_cutedsl, flashinfer_cutlass, flashinfer_trtllm, marlin, triton. (from the recipe: profile:flydsl)"),
])
def test_chart_refuses_in_plans_words(helm, tmp_path, settings, message):
    """A PD pool's layout rules (core/select._check_pool) and vLLM releases the chart has no key for
    (judged by their class, select.version_classes): both refuse, with the same message."""
    from entrypoint.core.base.errors import KimiError

    environ = {f"KIMI_{k.upper()}": ("1" if v is True else str(v)) for k, v in settings.items()}
    with pytest.raises(KimiError) as refused:
        documents("k8s", environ)
    assert refused.value.message == message
    assert chart_refusal(helm, {"settings": settings}, tmp_path) == message


def test_helms_escape_hatches_render_and_validate(helm, tmp_path):
    """extraVolumes / extraVolumeMounts, runtimeClassName, priorityClassName, schedulerName on every GPU
    pod; extraObjects rendered with the release (a map, or a YAML string through tpl)."""
    values = {"settings": {"hardware": "h200", "strategy": "pd_cluster"},
              "extraVolumes": [{"name": "certs", "secret": {"secretName": "my-ca"}}],
              "extraVolumeMounts": [{"name": "certs", "mountPath": "/etc/ssl/extra", "readOnly": True}],
              "runtimeClassName": "nvidia", "priorityClassName": "llm-serving", "schedulerName": "kai-scheduler",
              "extraObjects": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ .Release.Name }}-extra"},
                                "data": {"a": "b"}},
                               "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {{ .Release.Name }}-sa\n"]}
    objects = release_template(helm, values, tmp_path)
    keyed = _keyed(objects)
    assert keyed[("ConfigMap", f"{RELEASE}-extra")]["data"] == {"a": "b"}
    assert ("ServiceAccount", f"{RELEASE}-sa") in keyed
    pods = [o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"] for o in objects if o["kind"] == "LeaderWorkerSet"]
    router = keyed[("Deployment", f"{RELEASE}-router")]["spec"]["template"]["spec"]
    assert len(pods) == 2 and "runtimeClassName" not in router  # GPU pods only
    for pod in pods:
        assert (pod["runtimeClassName"], pod["priorityClassName"], pod["schedulerName"]) == \
            ("nvidia", "llm-serving", "kai-scheduler")
        assert {"name": "certs", "secret": {"secretName": "my-ca"}} in pod["volumes"]
        for container in (pod["containers"][0], pod["initContainers"][0]):
            assert container["volumeMounts"][-1] == {"name": "certs", "mountPath": "/etc/ssl/extra", "readOnly": True}
    for obj in objects:
        validate(obj)


@pytest.mark.parametrize("values, why", [
    ({"extraVolumes": [{"name": "x", "hostPathz": {}}]}, "/extraVolumes/0"),
    ({"runtimeClassName": "Not_A_Name"}, "/runtimeClassName"),
    ({"serviceAccount": {"name": "bad name"}}, "/serviceAccount/name"),
    ({"persistence": {"existingClaim": "-claim"}}, "/persistence/existingClaim"),
    ({"hfToken": {"secretName": "Tok"}}, "/hfToken/secretName"),
    # no credential outside a Secret: URL userinfo in any value, a secret-named variable given as a value
    ({"autoscaling": {"prometheusUrl": "http://u:pw@prom:9090"}}, "/autoscaling/prometheusUrl"),
    ({"extraEnv": [{"name": "HTTPS_PROXY", "value": "http://u:pw@proxy:3128"}]}, "/extraEnv/0"),
    ({"extraEnv": [{"name": "my_api_key", "value": "x"}]}, "/extraEnv/0"),
    ({"podAnnotations": {"note": "s3://AKIA:pw@bucket"}}, "/podAnnotations/note"),
    ({"settings": {"hardware": "h200", "model": "s3://AKIA:pw@bucket/kimi"}}, "/settings/model"),
    ({"settings": {"hardware": "h200", "extra_args": "--tokenizer https://u:pw@hub/tok"}}, "/settings/extra_args"),
    ({"settings": {"hardware": "h200", "extra_args": "--max-num-seqs 8\t--api_key=sk"}}, "/settings/extra_args"),
    ({"settings": {"hardware": "h200", "extra_args": "--hf-tok hf_x"}}, "/settings/extra_args"),
])
def test_the_schema_refuses_bad_names_and_credentials(helm, tmp_path, values, why):
    refusal = chart_refusal(helm, {"settings": {"hardware": "h200"}, **values}, tmp_path)
    assert refusal is not None and why in refusal and "pw@" not in refusal, refusal


# issue 50 item 1: the chart reads each setting as written, so the schema takes the one spelling plan keeps of
# it; the other spellings plan reads alike are refused, naming the key
@pytest.mark.parametrize("settings", [{"hardware": " h200 "}, {"load_format": "AUTO"}, {"port": "9000"},
                                      {"extra_args": ["--max-num-seqs", "32"]}, {"extra_args": " --max-num-seqs 32"},
                                      {"replica_addrs": "a,b"}, {"replica_addrs": [" a"]}, {"vllm_version": "v0.32.0"},
                                      {"features": "-spec_decoding, +x"}, {"skip_memory_check": "true"},
                                      {"name": "kimi "}, {"model": "moonshotai/Kimi-K2.5\t"}, {"strategy": ""}])
def test_the_schema_takes_one_spelling_of_each_setting(helm, tmp_path, settings):
    (key,) = settings
    refusal = chart_refusal(helm, {"settings": {"hardware": "h200", **settings}}, tmp_path)
    assert refusal is not None and f"/settings/{key}" in refusal, refusal


def test_chart_values_extend_the_objects(helm, tmp_path):
    values = {"settings": {"hardware": "h200"}, "nodeSelector": {"pool": "gpu"},
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
              "extraEnv": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
              "persistence": {"size": "2Ti", "storageClassName": "fast"}, "service": {"type": "LoadBalancer"}}
    objects = _keyed(release_template(helm, values, tmp_path))
    assert not [k for k in objects if k[0] == "Namespace"]
    pod = objects[("Deployment", "kimi-k2-5")]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu", "kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": "NVIDIA-H200"}
    assert pod["tolerations"] == values["tolerations"]
    assert pod["containers"][0]["env"][-1] == {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}
    assert objects[("PersistentVolumeClaim", "kimi-k2-5-cache")]["spec"] == {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Ti"}}, "storageClassName": "fast"}
    assert objects[("Service", "kimi-k2-5-api")]["spec"]["type"] == "LoadBalancer"


@pytest.mark.slow
def test_generated_files_are_current():
    from buildsys import chart

    assert chart.stale() == [], "run `python build.py chart`"


def test_values_defaults_are_the_settings_defaults():
    """values.yaml's operating values start where KIMI_* start, so an unset value means the same."""
    import yaml

    from entrypoint.core.compose.settings import BY_NAME

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["replicas"] == BY_NAME["replicas"].default
    monitoring = values["monitoring"]
    assert (monitoring["enabled"], monitoring["sloTtftMs"], monitoring["sloItlMs"]) == (
        BY_NAME["monitoring"].default, BY_NAME["slo_ttft_ms"].default, BY_NAME["slo_itl_ms"].default)
    assert monitoring["scraper"] == {"namespace": BY_NAME["scraper_namespace"].default,
                                     "podLabels": dict(BY_NAME["scraper_labels"].default)}
    auto = values["autoscaling"]
    assert (auto["maxReplicas"], auto["waitingPerReplica"], auto["kvCachePercent"], auto["prometheusUrl"]) == (
        BY_NAME["max_replicas"].default, BY_NAME["scale_waiting"].default, BY_NAME["scale_kv_percent"].default,
        BY_NAME["prometheus_url"].default)


def test_the_release_namespace_is_the_objects_namespace_unless_settings_name_one(helm, tmp_path):
    values = {"settings": {"hardware": "h200"}}
    assert {o["metadata"].get("namespace", o["metadata"]["name"]) for o in template(helm, values, tmp_path)} == {"default"}
    released = template(helm, values, tmp_path, "--namespace", "serving")
    assert {o["metadata"].get("namespace", o["metadata"]["name"]) for o in released} == {"serving"}
    named = template(helm, {"settings": {"hardware": "h200", "namespace": "llm"}}, tmp_path, "--namespace", "serving")
    assert {o["metadata"].get("namespace", o["metadata"]["name"]) for o in named} == {"llm"}


def _plan_refuses(environ: dict) -> bool:
    from entrypoint.core.base.errors import KimiError

    try:
        documents("k8s", environ)
    except KimiError:
        return True
    return False


def _configurations():
    """Every recipe on every hardware with every variant (one node: its default strategy); a PD
    cluster (pools derived from the variant) of every recipe on three hardware."""
    from entrypoint.core.data.recipe import load_catalog

    catalog = load_catalog()
    for slug, recipe in catalog.recipes.items():
        for hw in catalog.hardware:
            for variant in recipe.variants:
                yield {"recipe": slug, "hardware": hw, "variant": variant}
        for hw in ("h200", "b200", "mi355x"):
            yield {"recipe": slug, "hardware": hw, "strategy": "pd_cluster"}


def _agree(helm, tmp_path, configurations: list) -> list:
    """For each value set: the chart renders the objects where plan renders them (its shape table has the
    entry), and refuses (its render, else its pre-install check) where plan refuses. The check reads the
    settings as written, so its verdict is plan's on them: asserted, then not computed twice."""
    rendered = template_many(helm, [{"settings": settings} for settings in configurations], tmp_path, "kimi", "default")
    refused = []
    for settings, docs in zip(configurations, rendered):
        environ = {f"KIMI_{k.upper()}": str(v) for k, v in settings.items()}
        plan_refuses = _plan_refuses(environ)
        if isinstance(docs, str):  # helm's own error: a `fail` of the chart's few verdicts, or the schema
            assert plan_refuses, (settings, docs)
        else:
            assert hook_config(docs) == settings  # plan's input, untouched
            assert hook_env(check_hook(docs))["KIMI_NAME"] == "kimi"
            objects = [d for d in docs if not is_hook(d)]
            # where plan renders, the chart draws the objects; where it does not, only the check refuses
            assert bool(objects) or plan_refuses, (settings, "plan renders; the chart draws no object")
        refused.append(plan_refuses)
    assert any(refused) and not all(refused)  # some fit, some do not
    return refused


@pytest.mark.slow
def test_chart_refuses_what_the_resolver_refuses_for_every_recipe_hardware_and_variant(helm, tmp_path):
    """The recipe's hardware list, its variants' hardware and memory needs, its GPU floors."""
    _agree(helm, tmp_path, list(_configurations()))


@pytest.mark.slow
def test_chart_refuses_what_plan_refuses_for_every_kv_choice_on_every_hardware(helm, tmp_path):
    """Each KV choice (docs/kv-cache.md) of the default recipe on every hardware, its default
    strategy: the chart renders it where plan does (a KV store's objects, LMCache's sidecar) and
    refuses it where plan does (brands, hardware, opt-in, vLLM floor)."""
    from entrypoint.core.compose.kv import load_kv
    from entrypoint.core.data.recipe import load_catalog

    data = load_kv()
    _agree(helm, tmp_path, [{"hardware": hw, "kv_offload": kid}
                            for hw in load_catalog().hardware for kid in (*data.options, *data.stores)])


@pytest.mark.parametrize("settings", [
    {"hardware": "h200", "model_revision": "a&b<c>d", "extra_args": "--chat-template 'x<&>é\u2028y'"},
    {"hardware": "h200", "features": "-spec_decoding", "skip_memory_check": True, "port": 9000, "nodes": 1}])
def test_the_settings_configmap_holds_plans_bytes(helm, tmp_path, settings):
    """Issue 50: the user's settings reach every container as written, in one ConfigMap: the chart's
    (Helm's toJson) holds plan's bytes, Go's escapes of <, >, & and U+2028 included, and reads back
    as the settings given (typed as written: YAML's and TOML's integers and booleans alike)."""
    name = f"{RELEASE}-settings"
    charted = chart_objects(helm, settings, {}, tmp_path)
    chart = {o["metadata"]["name"]: o for o in charted if o["kind"] == "ConfigMap"}
    plan = {o["metadata"]["name"]: o for o in plan_objects(settings, {}, tmp_path) if o["kind"] == "ConfigMap"}
    assert chart[name]["data"] == plan[name]["data"]
    # every pod that reads them rolls when they change (Helm's checksum idiom: Sprig's sha256sum)
    digest = hashlib.sha256(chart[name]["data"]["settings.json"].encode()).hexdigest()
    (deployment,) = [o for o in charted if o["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["metadata"]["annotations"]["checksum/settings"] == digest
    assert json.loads(chart[name]["data"]["settings.json"]) == settings
    if "<" in str(settings):  # written as Go writes it, so either renderer's bytes are the other's
        assert "<" not in plan[name]["data"]["settings.json"] and "\\u003c" in plan[name]["data"]["settings.json"]
