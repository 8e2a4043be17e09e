"""Random chart values that look valid (each passes values.schema.json): the settings an operator
writes, mixed at random, so that chart and plan are compared on configurations nobody wrote a
case for (tests/chart/test_agreement.py). Seeded per run (KIMI_CHART_SEED or the clock); the seed
is in the failure message, so a disagreement is replayed."""

from __future__ import annotations

import random

from buildsys.chart import chart_hardware
from entrypoint.core.data.recipe import load_catalog

# extra vLLM arguments as one shell line (KIMI_EXTRA_ARGS, the schema's one spelling): `=`, abbreviations,
# aliases, tabs between words, quoting, a secret option in another spelling, and the options that draw a
# deployment (plan refuses them: typed settings)
EXTRA_ARGS = ["--max-num-seqs 64", "--enable-prefix-caching", "--api-key sk-abc123", "--hf-token hf_abc",
              "--port 9000", "--max-model-len 32768", "--kv-transfer-config {}", "--max-num-seqs 32",
              "--max-model-len 8192", "--por 9000", "--shutdown-timeout=600", "-tp 8",
              "--tensor_parallel_size=4", "--max-num-seqs 8\t--api-key=sk-abc", "--api_k sk-abc", "--kv-transfer-conf {}",
              "--max-model-len\t4096", "--chat-template '{{ a b }}'\"'\"'s'", "--load-format safetensors",
              "--served-model-name kimi"]
MODELS = ["s3://models/kimi", "gs://models/kimi", "moonshotai/Kimi-K2.5", "/models/kimi"]
LOAD_FORMATS = ["recipe", "auto", "safetensors", "runai_streamer", "fastsafetensors", "instanttensor"]
ROUTER_POLICIES = ["cache_aware", "round_robin", "power_of_two", "consistent_hash", "kv_aware", "bogus"]
# the recorded grammars, and releases with no grammar or table key of their own (judged by their class:
# select.version_classes)
VLLM_VERSIONS = ["0.19.1", "0.32.0", "0.33.0", "0.30.0", "0.22.0", "0.27.0"]


def _maybe(rng: random.Random, p: float) -> bool:
    return rng.random() < p


def settings(rng: random.Random) -> dict:
    """One random configuration: (the KIMI_CONFIG file's keys, the chart's operating values)."""
    cat = load_catalog()
    recipes = sorted(cat.recipes)
    features = sorted({f for r in cat.recipes.values() for f in r.features})
    profiles = sorted({p for r in cat.recipes.values() for p in r.profiles})
    variants = sorted({v for r in cat.recipes.values() for v in r.variants})
    from entrypoint.core.compose.kv import load_kv

    kv = load_kv()
    s: dict = {"hardware": rng.choice(chart_hardware(cat))}
    if _maybe(rng, 0.6):
        s["recipe"] = rng.choice(recipes)
    strategy = rng.choice(sorted(cat.strategies)) if _maybe(rng, 0.7) else None
    if strategy:
        s["strategy"] = strategy
    if _maybe(rng, 0.5):
        s["nodes"] = rng.choice([1, 2, 2, 3, 4, 8])
    if _maybe(rng, 0.3):
        s["variant"] = rng.choice(variants)
    if _maybe(rng, 0.25):
        picked = rng.sample(features, rng.randint(1, 2))
        sign = rng.choice(["+", "-", ""])
        s["features"] = ",".join(sign + f for f in picked)
    if _maybe(rng, 0.15):
        s["profile"] = rng.choice(profiles)
    if _maybe(rng, 0.2):
        s["vllm_version"] = rng.choice(VLLM_VERSIONS)
    if _maybe(rng, 0.2):
        s["load_format"] = rng.choice(LOAD_FORMATS)
    if _maybe(rng, 0.15):
        s["model"] = rng.choice(MODELS)
    if _maybe(rng, 0.05):
        s["role"] = rng.choice(["prefill", "decode", "router", "instance"])
    if _maybe(rng, 0.2):
        s["kv_offload"] = rng.choice(sorted([*kv.options, *kv.stores]))
        if _maybe(rng, 0.3):
            s["kv_instances"] = rng.choice([1, 2, 3])
    if strategy == "pd_cluster" or _maybe(rng, 0.05):
        for pool in ("prefill", "decode"):
            if _maybe(rng, 0.3):
                s[f"{pool}_nodes"] = rng.choice([0, 1, 2])
            if _maybe(rng, 0.2):
                s[f"{pool}_parallelism"] = rng.choice(["tp", "tep", "dep"])
    if _maybe(rng, 0.1):
        s["port"] = rng.choice([8080, 9000])
    if _maybe(rng, 0.1):
        s["router_port"] = rng.choice([8088, 8088, 29000])  # 29000: the fleet router's metrics port
    if _maybe(rng, 0.1):
        s["name"] = "kimi"
    if _maybe(rng, 0.1):
        s["namespace"] = "llm"
    if _maybe(rng, 0.15):
        s["extra_args"] = rng.choice(EXTRA_ARGS)
    if _maybe(rng, 0.3):
        s["skip_memory_check"] = True
    if _maybe(rng, 0.08):  # KIMI_PRELOAD: the weight cache beside a single-node engine (a release with evidence)
        s["preload"] = True
        if _maybe(rng, 0.7):
            s["vllm_version"] = "0.32.0"
    if _maybe(rng, 0.1):
        s["cache_dir"] = rng.choice(["/models", "/tmp"])
    if _maybe(rng, 0.1):  # the stop (docs/day2.md): a drain of its own, a grace of its own, or one too short for it
        s["drain_timeout"] = rng.choice([0, 45, 600])
        if _maybe(rng, 0.6):
            s["stop_grace"] = rng.choice([100, 645])
    operate: dict = {}
    if _maybe(rng, 0.25):
        operate["monitoring"] = True
    if _maybe(rng, 0.25):
        operate["autoscaling"] = rng.choice(["keda", "hpa"])
    if _maybe(rng, 0.35):  # a fleet (docs/fleet.md): copies behind vllm-router (the default), a Gateway, or none
        operate["replicas"] = rng.choice([1, 2, 2, 3])
        _front(rng, s, 0.12)
    return s, operate


def _front(rng: random.Random, s: dict, p_policy: float) -> None:
    """What fronts a fleet's copies (settings.router unset: vllm-router), and at times a router policy
    and the stream front (on: a fleet even of one copy; off), drawn apart (from the value set so far),
    so the rest of each seed's sample stays what it was."""
    front = rng.choice([None, None, "vllm-router", "gateway", "none"])
    if front:
        s["router"] = front
    if _maybe(rng, p_policy):
        s["router_policy"] = rng.choice(ROUTER_POLICIES)
    apart = random.Random(repr(sorted(s.items())))
    if _maybe(apart, 0.2):
        s["stream_front"] = apart.choice(["on", "on", "off"])


def sample(seed: int, size: int) -> list:
    rng = random.Random(seed)
    return [settings(rng) for _ in range(size)]


def fleet_settings(rng: random.Random) -> tuple:
    """One random fleet (docs/fleet.md), most of them valid: a recipe's strategy with nodes it can
    run, copies (2 or 3 mostly) behind vllm-router, a Gateway or a plain Service, a router policy
    and port at times, monitoring and autoscalers; KV offload and vLLM versions at times (what plan
    refuses in a fleet); a PD cluster a quarter of the time (a PD fleet: its pools' nodes and
    parallelism at times, one unit autoscaled among them)."""
    cat = load_catalog()
    s: dict = {"hardware": rng.choice(chart_hardware(cat)), "skip_memory_check": _maybe(rng, 0.7)}
    if _maybe(rng, 0.5):
        s["recipe"] = rng.choice(sorted(cat.recipes))
    pd = sorted(k for k, v in cat.strategies.items() if v.deploy_type == "pd_cluster")
    s["strategy"] = rng.choice(pd) if _maybe(rng, 0.25) else rng.choice(sorted(cat.strategies))
    kind = cat.strategies[s["strategy"]].deploy_type
    if kind == "multi_node":
        s["nodes"] = rng.choice([2, 2, 3, 4])
    if kind == "pd_cluster":
        for pool in ("prefill", "decode"):
            if _maybe(rng, 0.3):
                s[f"{pool}_nodes"] = rng.choice([1, 1, 2])
            if _maybe(rng, 0.2):
                s[f"{pool}_parallelism"] = rng.choice(["tp", "tep", "dep"])
    _front(rng, s, 0.3)
    if _maybe(rng, 0.15):
        s["router_port"] = rng.choice([8088, 29000])
    if _maybe(rng, 0.1):
        s["port"] = 9000
    if _maybe(rng, 0.15):
        s["vllm_version"] = rng.choice(VLLM_VERSIONS)
    if _maybe(rng, 0.1):
        from entrypoint.core.compose.kv import load_kv

        kv = load_kv()
        s["kv_offload"] = rng.choice(sorted([*kv.options, *kv.stores]))
    if _maybe(rng, 0.05):
        s["replica_addrs"] = ["10.0.0.1", "10.0.0.2"]
    if _maybe(rng, 0.1):
        s["name"] = "kimi"
    operate: dict = {"replicas": rng.choice([1, 2, 2, 3, 3])}
    if _maybe(rng, 0.4):
        operate["monitoring"] = True
    if _maybe(rng, 0.4):
        operate["autoscaling"] = rng.choice(["keda", "hpa"])
    return s, operate


def fleet_sample(seed: int, size: int) -> list:
    rng = random.Random(seed)
    return [fleet_settings(rng) for _ in range(size)]
