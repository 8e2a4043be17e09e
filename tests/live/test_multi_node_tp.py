"""multi_node_tp, two "nodes" (one rank each) on two loopback hosts: rank 0 and a headless rank 1
rendezvous over gloo (--nnodes/--node-rank/--master-addr), each its own entrypoint with the
cluster's KIMI_NODE_RANK and KIMI_HEAD_ADDR; the front is rank 0."""

import pytest

from tests.live.conftest import base_settings
from tests.live.exercise import check_front, check_stop
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_STRATEGY="multi_node_tp", KIMI_NODES="2",
                             KIMI_HEAD_ADDR=host(0), KIMI_IFACE="lo")
    return settings, lambda proc: host(proc.rank), {}


def test_the_plan_is_two_entrypoints_of_one_tp_group(running):
    engines = running.plan.engines
    assert [(p.role, p.rank, p.local_gpus) for p in engines] == [("head", 0, 1), ("worker", 1, 1)]
    assert engines[1].vllm.headless and engines[0].vllm.tensor_parallel == 2


def test_rank_0_answers_through_the_kimi_parsers(running):
    check_front(running)


def test_a_stop_drains_every_node(running):
    check_stop(running)
