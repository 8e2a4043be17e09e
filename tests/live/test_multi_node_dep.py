"""multi_node_dep, two "nodes" of one rank each: data parallel 2 with expert parallelism across the
nodes (--data-parallel-address, --data-parallel-start-rank), every node serving HTTP
(--data-parallel-hybrid-lb, which vLLM turns into external load balancing with one local rank). The
test-only plugin closes vLLM 0.32.0's CPU gaps for MoE expert and data parallelism."""

import pytest

from tests.live.conftest import base_settings, plugin_env
from tests.live.exercise import check_front, check_ranks_agree, check_stop
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_STRATEGY="multi_node_dep", KIMI_NODES="2", KIMI_HEAD_ADDR=host(0),
                             KIMI_IFACE="lo", KIMI_PREFLIGHT="warn")
    return settings, lambda proc: host(proc.rank), plugin_env()


def test_the_plan_is_dp_2_over_two_nodes_each_serving_http(running):
    head, worker = running.plan.engines
    assert head.vllm.data_parallel == 2 and head.vllm.data_parallel_local == 1
    assert not worker.vllm.headless and worker.serves_http


def test_rank_0_answers_through_the_kimi_parsers(running):
    check_front(running)


def test_every_node_answers(running):
    check_ranks_agree(running)  # every node serves HTTP: greedy, the same tokens from either node's rank


def test_a_stop_drains_every_node(running):
    check_stop(running)
