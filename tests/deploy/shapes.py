"""The deployment shapes the deploy tests render: name -> the user's KIMI_* environment."""

from __future__ import annotations

import importlib
from typing import Dict, Mapping

import yaml

from entrypoint.app.deploy import deployment_launch

COMPOSE: Dict[str, dict] = {
    "single-h200": {"KIMI_HARDWARE": "h200"},
    "single-mi355x": {"KIMI_HARDWARE": "mi355x"},
    "pd-shared-b200": {"KIMI_HARDWARE": "b200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "0",
                       "KIMI_DECODE_NODES": "0"},
    "pd-shared-mi355x": {"KIMI_HARDWARE": "mi355x", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "0",
                         "KIMI_DECODE_NODES": "0", "KIMI_NAME": "kimi"},
    "k2-instruct-single-b200": {"KIMI_RECIPE": "kimi-k2-instruct", "KIMI_HARDWARE": "b200"},
    "linear-single-mi300x": {"KIMI_RECIPE": "kimi-linear-48b-a3b-instruct", "KIMI_HARDWARE": "mi300x"},  # 1 GPU
    # KV offload on one node (docs/kv-cache.md): LMCache beside the engine, a store of one instance, PD + store
    "kv-lmcache-h200": {"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "lmcache"},
    "kv-distributed-mi355x": {"KIMI_HARDWARE": "mi355x", "KIMI_KV_OFFLOAD": "kv_store_distributed_mooncake"},
    # KIMI_PRELOAD: the weight cache as a companion service (docs/day2.md)
    "preload-h200": {"KIMI_HARDWARE": "h200", "KIMI_PRELOAD": "1", "KIMI_VLLM_VERSION": "0.32.0"},
    "preload-mi300x": {"KIMI_HARDWARE": "mi300x", "KIMI_PRELOAD": "1", "KIMI_VLLM_VERSION": "0.32.0"},
    "kv-centralized-pd-shared-b200": {"KIMI_HARDWARE": "b200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "0",
                                      "KIMI_DECODE_NODES": "0", "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake"},
}

MULTI_NODE_STRATEGIES = ("multi_node_tp", "multi_node_tp_pp", "multi_node_dep", "multi_node_tep")

K8S: Dict[str, dict] = {
    "single-h200": {"KIMI_HARDWARE": "h200"},
    "single-mi300x-features": {"KIMI_HARDWARE": "mi300x", "KIMI_FEATURES": "-spec_decoding", "KIMI_NAME": "kimi"},
    **{f"{s}-h100x2": {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": s, "KIMI_NODES": "2"} for s in MULTI_NODE_STRATEGIES},
    "multi_node_tp-gb200x4": {"KIMI_HARDWARE": "gb200", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "4"},
    "pd-h200": {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster"},
    "pd-h200-2x1": {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "2",
                    "KIMI_DECODE_NODES": "1", "KIMI_PREFILL_PARALLELISM": "tp"},
    "pd-mi355x-2x2": {"KIMI_HARDWARE": "mi355x", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "2",
                      "KIMI_DECODE_NODES": "2"},
    # the other recipes: K3's own shapes (its tp_dp grant, its derived PD pools: prefill 1, decode 2)
    "k3-single-b300": {"KIMI_RECIPE": "kimi-k3", "KIMI_HARDWARE": "b300"},
    "k3-tp_dp-gb300x4": {"KIMI_RECIPE": "kimi-k3", "KIMI_HARDWARE": "gb300", "KIMI_STRATEGY": "multi_node_tp_dp",
                         "KIMI_NODES": "4"},
    "k3-pd-mi355x": {"KIMI_RECIPE": "kimi-k3", "KIMI_HARDWARE": "mi355x", "KIMI_STRATEGY": "pd_cluster"},
    # Kimi-Linear: one GPU of a node (TP 1), the whole node on H100, a DEP layout over two nodes
    "linear-single-h200": {"KIMI_RECIPE": "kimi-linear-48b-a3b-instruct", "KIMI_HARDWARE": "h200"},
    "linear-single-h100": {"KIMI_RECIPE": "kimi-linear-48b-a3b-instruct", "KIMI_HARDWARE": "h100"},
    "linear-dep-mi325x2": {"KIMI_RECIPE": "kimi-linear-48b-a3b-instruct", "KIMI_HARDWARE": "mi325x",
                           "KIMI_STRATEGY": "multi_node_dep", "KIMI_NODES": "2"},
    # KV offload (docs/kv-cache.md): LMCache's sidecar, the two Mooncake stores, one with PD pools
    "kv-lmcache-h200": {"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "lmcache"},
    # KIMI_PRELOAD: the weight cache as a native sidecar of the engine's pod (docs/day2.md)
    "preload-h200": {"KIMI_HARDWARE": "h200", "KIMI_PRELOAD": "1", "KIMI_VLLM_VERSION": "0.32.0"},
    "kv-simple-h100x2": {"KIMI_HARDWARE": "h100", "KIMI_NODES": "2", "KIMI_KV_OFFLOAD": "simple"},
    "kv-centralized-h200x3": {"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake",
                              "KIMI_KV_INSTANCES": "3"},
    "kv-distributed-mi355x": {"KIMI_HARDWARE": "mi355x", "KIMI_KV_OFFLOAD": "kv_store_distributed_mooncake"},
    "kv-centralized-pd-b200": {"KIMI_HARDWARE": "b200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "1",
                               "KIMI_DECODE_NODES": "1", "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake"},
}


# Each recipe's default deployment name (its `deployment_name`), written out here.
DEFAULT_NAMES = {None: "kimi-k2-5", "kimi-k2.5": "kimi-k2-5", "kimi-k3": "kimi-k3",
                 "kimi-k2-instruct": "kimi-k2-instruct", "kimi-linear-48b-a3b-instruct": "kimi-linear-48b-a3b-instruct"}


def deployment_name(environ: Mapping[str, str]) -> str:
    """The name a shape's deployment has: KIMI_NAME, else its recipe's default."""
    return environ.get("KIMI_NAME") or DEFAULT_NAMES[environ.get("KIMI_RECIPE")]


def renderer(fmt: str):
    """The module (or, for the bench shapes, the class) `plan --format FMT` renders with."""
    from entrypoint.cli.plan import FILE_RENDERERS

    path, _, attribute = FILE_RENDERERS.get(fmt, f"entrypoint.render.{fmt}").partition(":")
    module = importlib.import_module(path)
    return getattr(module, attribute) if attribute else module


def launch_for(fmt: str, environ: Mapping[str, str]):
    """The launch `kimi-serve plan --format FMT` renders, from the user's environment."""
    return deployment_launch(renderer(fmt), environ)


def render(fmt: str, environ: Mapping[str, str]) -> Dict[str, str]:
    return renderer(fmt).render(launch_for(fmt, environ))


def container_environ(docs: list, container: dict) -> dict:
    """A container's environment as the kubelet gives it (Kubernetes 1.30 `envVarsToMap`): each
    value, and each configMapKeyRef read from the ConfigMaps rendered beside it (the user's settings:
    KIMI_CONFIG_JSON). Other valueFrom entries (the downward API) are the caller's to fill."""
    maps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
    out = {}
    for e in container.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
        if "value" in e:
            out[e["name"]] = str(e["value"])
        elif ref:
            out[e["name"]] = maps[ref["name"]][ref["key"]]
    return out


# libyaml's loader where it is there (as entrypoint/core/base/files.py reads the recipes): a rendering
# parses about ten times faster, and the chart and deploy tests parse a few thousand
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_documents(text: str) -> list:
    """The documents of a multi-document YAML text, empty ones left out."""
    return [doc for doc in yaml.load_all(text, Loader=FAST_LOADER) if doc]


def documents(fmt: str, environ: Mapping[str, str]) -> list:
    return [doc for text in render(fmt, environ).values() for doc in yaml.load_all(text, Loader=FAST_LOADER)]
