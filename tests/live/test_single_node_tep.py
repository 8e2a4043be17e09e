"""single_node_tep on the `cpu` target (KIMI_CPU_RANKS=2): TP 2 with expert parallelism on the tiny
MoE model. vLLM 0.32.0's CPU MoE kernel cannot run experts split over ranks: preflight names that
limit (recipes/hardware.yaml host_backend.limits), KIMI_PREFLIGHT=warn starts anyway, and the
test-only plugin (tests/live/vllm_cpu_plugin) closes the gap."""

import pytest

from tests.live.conftest import base_settings, plugin_env
from tests.live.exercise import check_front, check_stop, preflight_named
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_STRATEGY="single_node_tep", KIMI_CPU_RANKS="2", KIMI_PREFLIGHT="warn")
    return settings, lambda p: host(0), plugin_env()


def test_the_plan_is_tp_2_with_expert_parallelism(running):
    (engine,) = running.plan.engines
    assert engine.vllm.tensor_parallel == 2 and engine.vllm.expert_parallel


def test_preflight_named_the_backend_limit(running):
    preflight_named(running, "host_limits: error: moe_expert_parallel")


def test_it_answers_through_the_kimi_parsers(running):
    check_front(running)


def test_a_stop_drains(running):
    check_stop(running)
