"""multi_node_tp_pp, two "nodes" of one rank each: pipeline parallel 2 across the nodes (TP 1 within
each), the stages wired through the same rendezvous as multi_node_tp (--nnodes, --node-rank,
--master-addr, a headless rank 1). vLLM 0.32.0's CPU runner cannot run a later stage with
--enforce-eager (which these tests use to skip minutes of compile): preflight names the limit, and
the test-only plugin closes it."""

import pytest

from tests.live.conftest import base_settings, plugin_env
from tests.live.exercise import check_front, check_stop, preflight_named
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_STRATEGY="multi_node_tp_pp", KIMI_NODES="2",
                             KIMI_HEAD_ADDR=host(0), KIMI_IFACE="lo", KIMI_PREFLIGHT="warn")
    return settings, lambda proc: host(proc.rank), plugin_env()


def test_the_plan_is_two_pipeline_stages(running):
    head, worker = running.plan.engines
    assert (head.vllm.pipeline_parallel, head.vllm.tensor_parallel, worker.vllm.headless) == (2, 1, True)


def test_preflight_named_the_backend_limit(running):
    preflight_named(running, "eager_pipeline_parallel")


def test_rank_0_answers_through_the_kimi_parsers(running):
    check_front(running)


def test_a_stop_drains_every_node(running):
    check_stop(running)
