"""single_node_tp on the `cpu` target with KIMI_CPU_RANKS=2: one entrypoint, vLLM's TP 2 over two
CPU ranks (mp executor, gloo); the Kimi parsers on the tiny Kimi-K2-architecture model."""

import pytest

from tests.live.conftest import base_settings
from tests.live.exercise import check_front, check_stop, completion
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def SHAPE(tiny, cache):
    return base_settings(tiny, cache, KIMI_STRATEGY="single_node_tp", KIMI_CPU_RANKS="2"), lambda p: host(0), {}


def test_the_plan_is_one_engine_of_two_ranks_with_the_cpu_environment(running):
    (engine,) = running.plan.engines
    assert engine.vllm.tensor_parallel == 2 and engine.local_gpus == 2
    assert {k: engine.env[k] for k in ("VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE", "OMP_NUM_THREADS")} == {
        "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}


def test_it_answers_through_the_kimi_parsers(running):
    check_front(running)


def test_greedy_tokens_are_deterministic(running):
    url, model = running.front.url(), running.plan.served_model_name
    assert completion(url, model)["choices"][0]["text"] == completion(url, model)["choices"][0]["text"]


def test_a_stop_drains(running):
    check_stop(running)
