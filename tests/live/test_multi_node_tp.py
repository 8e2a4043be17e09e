"""multi_node_tp, two "nodes" (one rank each) on two loopback hosts: rank 0 and a headless rank 1
rendezvous over gloo (--nnodes/--node-rank/--master-addr), each its own entrypoint with the
cluster's KIMI_NODE_RANK and KIMI_HEAD_ADDR; the front is rank 0. Then a lost node (issue 38): the
worker's container killed (SIGKILL, as a node lost with its power), rank 0 must not hang on the
collective but exit within a bound, so the platform restarts the copy as a unit (a LeaderWorkerSet
recreates the group: RecreateGroupOnPodRestart; Compose and Slurm restart what exited). Measured
without a watch: the idle rank 0 ran on for as long as anyone waited (180 s tried), so each node's
entrypoint watches its peers (node/peers.py, recipes/serving.yaml peer_watch). The two-node drain is
the other multi-node modules'."""

import os
import signal
import time


import pytest

from tests.live.conftest import base_settings
from tests.live.exercise import check_front
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


EXIT_WITHIN_S = 180  # measured 9 s; room for a loaded machine


def test_rank_0_exits_when_its_worker_node_is_lost(running):
    head, worker = running.nodes
    os.killpg(worker.popen.pid, signal.SIGKILL)
    lost = time.monotonic()
    try:
        head.popen.wait(EXIT_WITHIN_S)
    except Exception:  # noqa: BLE001 - report the hang with the head's log
        pytest.fail(f"rank 0 still runs {EXIT_WITHIN_S} s after its worker was lost:\n{head.tail(40)}")
    running.stopped, running.stop_s = {"head-0": head.popen.returncode, "worker-1": "SIGKILL"}, time.monotonic() - lost
    assert "peer watch: the node at" in head.tail(200)  # the entrypoint's watcher stopped it
