"""`verify --concurrency N` against stand-ins (tests/verify/standin_server.py, vLLM 0.32.0's
shapes): a correct server passes; one whose tool-call deltas go empty only when streams overlap
(vllm-project/vllm#54701) fails the load check while every single-request check passes; one that
repeats a token under load (vllm-project/vllm#42426) fails the degenerate-output check.
The real vLLM server passing it is in test_real_vllm.py."""

import json

import pytest
from click.testing import CliRunner
from standin_server import SERVED_NAME

from entrypoint.cli.verify import command
from entrypoint.core.base import limits
from entrypoint.verify.client import CheckFailed
from entrypoint.verify.load import LOAD_CHECKS, degenerate, reassemble

FEATURES = "tool_calling,reasoning"
SINGLE = ["health", "models", "chat_thinking", "chat_instant", "tools_count_letter", "tools_compare", "image",
          "streaming"]


def verify(url: str, *args: str):
    result = CliRunner().invoke(command, ["--url", url, "--expect-model", SERVED_NAME, "--features", FEATURES,
                                          "--format", "json", "--timeout", "20", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, {c["check"]: c for c in json.loads(result.stdout)["checks"]}


@pytest.mark.slow
def test_a_correct_server_passes_every_check_under_load(standin):
    code, checks = verify(standin("ok").url, "--concurrency", "8")
    assert code == 0
    assert list(checks) == SINGLE + list(LOAD_CHECKS)
    assert {c["status"] for c in checks.values()} == {"pass"}
    assert checks["load_tools"]["message"] == "8 concurrent streams, each reassembled to the exact tool call"
    assert checks["load_degenerate"]["message"] == "no output of the 24 streams under load is one token repeated"


@pytest.mark.slow
def test_tool_deltas_corrupted_only_when_streams_overlap_fail_the_load_check(standin):
    server = standin("overlap_tool_deltas")
    code, checks = verify(server.url)  # one request at a time: nothing to see
    assert code == 0 and list(checks) == SINGLE and server.overlaps == 0
    code, checks = verify(server.url, "--concurrency", "8")
    assert code == 1
    assert server.overlaps >= 8 and server.corrupted >= 1  # the streams overlapped; only tool calls were corrupted
    assert {checks[name]["status"] for name in SINGLE} == {"pass"}
    assert checks["load_tools"]["status"] == "fail"
    message = checks["load_tools"]["message"]
    assert message.startswith(f"{server.corrupted} of 8 concurrent streams went wrong; stream ")
    assert "arguments reassembled to '', which is not JSON" in message
    assert "vllm-project/vllm#54701" in message
    assert [checks[n]["status"] for n in ("load_thinking", "load_streaming", "load_degenerate")] == ["pass"] * 3


@pytest.mark.slow
def test_a_token_repeated_under_load_fails_the_degenerate_check(standin):
    code, checks = verify(standin("overlap_repeats").url, "--concurrency", "4")
    assert code == 1
    assert checks["load_degenerate"]["status"] == "fail"
    assert "one token repeated ('!!!!" in checks["load_degenerate"]["message"]
    assert "vllm-project/vllm#42426" in checks["load_degenerate"]["message"]
    assert checks["load_streaming"]["status"] == "fail"
    assert "reassembled to '!!!!" in checks["load_streaming"]["message"]


def test_load_checks_follow_the_features(standin):
    result = CliRunner().invoke(command, ["--url", standin("ok").url, "--expect-model", SERVED_NAME, "--features", "",
                                          "--concurrency", "2",
                                          "--format", "json", "--timeout", "20"])
    checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
    assert result.exit_code == 0
    assert checks["load_tools"]["status"] == checks["load_thinking"]["status"] == "skip"
    assert checks["load_streaming"]["status"] == checks["load_degenerate"]["status"] == "pass"


def test_an_unreachable_server_fails_the_load_checks_as_not_run(closed_port_url):
    result = CliRunner().invoke(command, ["--url", closed_port_url, "--expect-model", SERVED_NAME, "--features",
                                          FEATURES, "--concurrency", "4",
                                          "--format", "json", "--timeout", "5"])
    checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
    assert result.exit_code == 1
    for name in LOAD_CHECKS:
        assert checks[name] == {**checks[name], "status": "fail",
                                "message": "not run: the server is not ready (/health failed)"}


@pytest.mark.parametrize("value", ["0", str(limits.MAX_VERIFY_CONCURRENCY + 1), "many"])
def test_a_bad_concurrency_is_a_usage_error(value):
    result = CliRunner().invoke(command, ["--url", "http://127.0.0.1:9", "--expect-model", SERVED_NAME, "--features",
                                          "", "--concurrency", value])
    assert result.exit_code == 2 and "--concurrency" in result.output


def test_degenerate_output_is_one_token_over_and_over():
    assert degenerate("!" * 32) == "!" * 32
    assert degenerate("The answer is " + "ok " * 20).strip() == ("ok " * 20).strip()
    assert degenerate("!!!!!!!!") is None  # short: not enough to judge
    for fine in ("42", "There are 3 r's in strawberry.", "9.9 is larger than 9.11.", "x = 1000000000000000 + 1 and "
                 "then we add the other numbers of the sum to get the total of all of them"):
        assert degenerate(fine) is None, fine


def _delta(**delta):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def test_a_stream_is_reassembled_from_its_fragments():
    events = [_delta(role="assistant", content=""), _delta(reasoning="Count "), _delta(reasoning="it."),
              _delta(tool_calls=[{"id": "functions.compare:0", "type": "function", "index": 0,
                                  "function": {"name": "compare", "arguments": '{"a": 9.11, '}}]),
              _delta(tool_calls=[{"index": 0, "function": {"arguments": '"b": 9.9}'}}]),
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}, {"choices": [], "usage": {}}]
    streamed = reassemble(events)
    assert streamed.reasoning == "Count it." and streamed.content == ""
    assert streamed.calls == {0: {"id": "functions.compare:0", "name": "compare", "arguments": '{"a": 9.11, "b": 9.9}'}}
    assert streamed.finish_reason == "tool_calls"


def test_a_tool_call_whose_id_changes_mid_stream_is_refused():
    events = [_delta(tool_calls=[{"id": "functions.a:0", "index": 0, "function": {"name": "a"}}]),
              _delta(tool_calls=[{"id": "functions.b:1", "index": 0, "function": {"arguments": "{}"}}])]
    with pytest.raises(CheckFailed, match="changed its id mid-stream"):
        reassemble(events)
