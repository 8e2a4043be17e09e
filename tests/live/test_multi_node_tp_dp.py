"""multi_node_tp_dp (Kimi-K3's layout), two "nodes" of one rank each: a TP group per node (TP 1
here), data parallel 2 across the nodes (--data-parallel-address, --data-parallel-start-rank), rank 0's API
server in front of both (internal load balancing: the headless rank 1 is the project's deliberate
difference `tp-dp-lb-mismatch`, docs/composition.md, found by this shape); the recipe's Kimi-K3
parsers. MoE data parallelism needs the
test-only plugin on vLLM 0.32.0's CPU backend (preflight names the limit)."""

import pytest

from tests.live.conftest import base_settings, plugin_env
from tests.live.exercise import check_front, check_ranks_agree, check_stop
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_RECIPE="kimi-k3", KIMI_STRATEGY="multi_node_tp_dp", KIMI_NODES="2",
                             KIMI_HEAD_ADDR=host(0), KIMI_IFACE="lo", KIMI_PREFLIGHT="warn")
    return settings, lambda proc: host(proc.rank), plugin_env()


def test_the_plan_is_a_tp_group_per_node_and_dp_across(running):
    head, worker = running.plan.engines
    assert (head.vllm.tensor_parallel, head.vllm.data_parallel, head.vllm.data_parallel_local) == (1, 2, 1)
    assert worker.vllm.headless and not worker.serves_http and "--data-parallel-start-rank" in worker.args


def test_rank_0_answers_through_the_kimi_k3_parsers(running):
    check_front(running)


def test_concurrent_requests_reach_both_ranks(running):
    check_ranks_agree(running)  # greedy: the same tokens on either node


def test_a_stop_drains_every_node(running):
    check_stop(running)
