"""A lost node of a multi-node copy (issue 38): multi_node_tp on two "nodes", the worker's container
killed (SIGKILL, as a node lost with its power): the head must not hang on the collective; it exits
within a bound, so the platform restarts the copy as a unit (a LeaderWorkerSet recreates the group:
RecreateGroupOnPodRestart; Compose and Slurm restart the container, or the job step, that exited).
Measured without a watch: the idle head ran on for as long as anyone waited (180 s tried), so each
node's entrypoint watches its peers (node/peers.py, recipes/serving.yaml peer_watch)."""

import signal
import time

import pytest

from tests.live.conftest import base_settings
from tests.live.exercise import completion
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
EXIT_WITHIN_S = 180  # vLLM's own watchdogs, on a loaded 2-core machine


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_STRATEGY="multi_node_tp", KIMI_NODES="2", KIMI_HEAD_ADDR=host(0),
                             KIMI_IFACE="lo")
    return settings, lambda proc: host(proc.rank), {}


def test_the_head_exits_when_its_worker_node_is_lost(running):
    head, worker = running.nodes
    completion(head.url(), running.plan.served_model_name)  # the group works first
    import os

    os.killpg(worker.popen.pid, signal.SIGKILL)
    lost = time.monotonic()
    try:
        code = head.popen.wait(EXIT_WITHIN_S)
    except Exception:  # noqa: BLE001 - report the hang with the head's log
        pytest.fail(f"the head still runs {EXIT_WITHIN_S} s after its worker was lost:\n{head.tail(40)}")
    took = time.monotonic() - lost
    running.lost_node_exit_s = took
    print(f"head exited with {code} {took:.1f} s after the worker was killed")
    assert "peer watch: the node at" in head.tail(200)  # the entrypoint's watcher stopped it
