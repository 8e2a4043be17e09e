"""single_node_dep on the `cpu` target (KIMI_CPU_RANKS=2): data parallel 2 with expert parallelism:
one API server, two engine-core ranks. Both gaps of vLLM 0.32.0's CPU backend (MoE expert and data
parallelism) are named by preflight and closed by the test-only plugin."""

import pytest

from tests.live.conftest import base_settings, plugin_env
from tests.live.exercise import check_front, check_ranks_agree, check_stop, preflight_named
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_STRATEGY="single_node_dep", KIMI_CPU_RANKS="2", KIMI_PREFLIGHT="warn")
    return settings, lambda p: host(0), plugin_env()


def test_the_plan_is_dp_2_with_expert_parallelism(running):
    (engine,) = running.plan.engines
    assert engine.vllm.data_parallel == 2 and engine.vllm.expert_parallel


def test_preflight_named_both_backend_limits(running):
    preflight_named(running, "moe_expert_parallel", "moe_data_parallel")


def test_it_answers_through_the_kimi_parsers(running):
    check_front(running)


def test_concurrent_requests_reach_both_ranks(running):
    check_ranks_agree(running)  # greedy: the same tokens on either rank


def test_a_stop_drains(running):
    check_stop(running)
