"""multi_node_tep, two "nodes" of one rank each: TP 2 with expert parallelism across the nodes, so
each node holds half of the experts (the test-only plugin closes vLLM 0.32.0's CPU MoE gap; preflight
names it and KIMI_PREFLIGHT=warn starts anyway)."""

import pytest

from tests.live.conftest import base_settings, plugin_env
from tests.live.exercise import check_front, check_stop
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_STRATEGY="multi_node_tep", KIMI_NODES="2", KIMI_HEAD_ADDR=host(0),
                             KIMI_IFACE="lo", KIMI_PREFLIGHT="warn")
    return settings, lambda proc: host(proc.rank), plugin_env()


def test_the_plan_is_tp_2_with_expert_parallelism_over_two_nodes(running):
    head, worker = running.plan.engines
    assert head.vllm.tensor_parallel == 2 and head.vllm.expert_parallel and worker.vllm.headless


def test_rank_0_answers_through_the_kimi_parsers(running):
    check_front(running)


def test_a_stop_drains_every_node(running):
    check_stop(running)
