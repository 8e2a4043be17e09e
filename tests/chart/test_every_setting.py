"""Every setting the chart takes, one at a time, against plan (tests/chart/test_agreement.py's
comparison): over one single-node copy and over an autoscaled, monitored PD cluster (the seeded
samples and the named cases draw multi-node groups), each value below renders the same objects from the chart and from `plan --format k8s`, or both
refuse. The seeded samples draw settings in combination; this covers each alone, so a setting that
changes the shape and that the chart's drawing does not know (KIMI_STREAM_FRONT=on asked for a fleet
of one copy, and the chart drew none) fails here the day it is added: a setting of the schema with
no values here fails too.

The values are written as users write them in values.yaml (lists as YAML lists: the schema's one
spelling), valid and not (plan refuses some over these bases, and the chart must refuse them too)."""

from __future__ import annotations

import json

import pytest

from tests.chart.helm import CHART
from tests.chart.test_agreement import _compare

BASES = (({"hardware": "h200", "skip_memory_check": True}, {}),
         ({"hardware": "mi355x", "strategy": "pd_cluster", "skip_memory_check": True}, {"autoscaling": "keda", "monitoring": True}))
ADDRS = ["10.0.0.1", "10.0.0.2"]
VALUES = {
    "recipe": ["kimi-k3"], "hardware": ["b200", "cpu"], "strategy": ["single_node_tp", "multi_node_tp"], "nodes": [2],
    "variant": ["mxfp4"], "profile": ["aiter-mxfp4"], "features": ["-spec_decoding"],
    "cpu_ranks": [2], "cpu_memory_gb": [64], "cpu_cores": [8], "cpu_threads": [4], "cpu_kvcache_gib": [4], "cpu_threads_bind": ["0-3"],
    "node_rank": [1], "head_addr": ["10.0.0.1"], "node_addr": ["10.0.0.2"], "iface": ["eth1"],
    "role": ["prefill", "router", "master", "instance", "lmcache", "preload"],
    "prefill_nodes": [2], "decode_nodes": [2], "prefill_parallelism": ["tp", "dep"], "decode_parallelism": ["tep"],
    "prefill_addrs": [ADDRS[:1]], "decode_addrs": [ADDRS[:1]], "prefill_dp_rpc_port": [29999], "decode_dp_rpc_port": [29998],
    "router_host": ["127.0.0.1"], "router_port": [8111], "router": ["gateway", "none"], "stream_front": ["on", "off"],
    "router_policy": ["round_robin"], "replica_addrs": [ADDRS], "router_selector": [["app=x"]],
    "kv_offload": ["offloading_cpu", "kv_store_centralized_mooncake", "lmcache"], "kv_instances": [2], "instance_addrs": [ADDRS],
    "mooncake_master_addr": ["10.0.0.1:50051"], "mooncake_device_name": ["mlx5_0"], "mooncake_store_device_name": ["mlx5_1"],
    "mooncake_store_host": ["10.0.0.3"], "model": ["/models/kimi"], "model_gb": [500], "model_revision": ["main"],
    "served_model_name": ["k"], "host": ["0.0.0.0"], "port": [9000], "vllm_version": ["0.34.0", "0.19.1"],
    "load_format": ["dummy", "auto"], "drain_timeout": [0, 600], "stop_grace": [100, 700], "preload": [True],
    "extra_args": ["--max-model-len 4096"], "skip_memory_check": [False], "download": [True], "download_backoff_s": [5],
    "dry_run": [True], "preflight": ["off"], "log_format": ["json"], "cache_dir": ["/models"],
    "image": ["registry.example/kimi:1"], "image_digest": ["sha256:" + "a" * 64], "name": ["zed"], "namespace": ["ns2"],
    "platform": ["k8s", "sagemaker"], "image_target": ["cuda"], "image_hardware": ["h200"], "image_serves": [["h200"]],
    "image_cuda": ["12.8"], "image_rocm": ["6.4"],
}


def test_every_setting_of_the_schema_has_values_here():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert sorted(schema["properties"]["settings"]["properties"]) == sorted(VALUES)


@pytest.mark.slow
def test_each_setting_alone_renders_what_plan_renders(helm, tmp_path):
    samples = [({**base, k: v}, operate) for base, operate in BASES for k, values in VALUES.items() for v in values]
    _compare(helm, tmp_path, samples, 0, "each setting alone")
