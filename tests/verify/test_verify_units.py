"""The pieces the checks rely on: the PNG, the local tool functions, path detection, the report."""

import json
import struct
import zlib

import pytest

from entrypoint.core.data.recipe import load_catalog
from entrypoint.verify.checks import ChatFacts, Verifier
from entrypoint.verify.client import CheckFailed, Reply, error_message
from entrypoint.verify.questions import is_number_only, looks_like_path, run_tool_call, says_nine_point_nine, solid_png
from entrypoint.core.base.check import Check
from entrypoint.verify.report import FAIL, PASS, SKIP, ServerCheck, VerifyReport


def png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + body), kind
        chunks.append((kind, body))
        at += 12 + length
    return chunks


def test_png_is_well_formed_and_holds_the_colour():
    chunks = dict(png_chunks(solid_png(4, 3, (220, 30, 30))))
    assert list(chunks) == [b"IHDR", b"IDAT", b"IEND"]
    assert struct.unpack(">IIBBBBB", chunks[b"IHDR"]) == (4, 3, 8, 2, 0, 0, 0)
    assert zlib.decompress(chunks[b"IDAT"]) == (b"\x00" + bytes([220, 30, 30]) * 4) * 3


def call(name: str, arguments) -> dict:
    return {"id": f"functions.{name}:0", "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(
    "name, arguments, result",
    [
        ("count_letter_in_string", '{"a": "Strawberry", "b": "R"}', "The letter 'R' appears 3 times in 'Strawberry'."),
        ("compare", '{"a": 9.11, "b": 9.9}', "9.9 is greater than 9.11"),
        ("compare", '{"a": "9.9", "b": "9.11"}', "9.9 is greater than 9.11"),
        ("add", '{"a": 2, "b": 3}', "5"),
        ("mul", '{"a": 1.5, "b": 4}', "6.0"),
    ],
)
def test_tool_calls_run_locally(name, arguments, result):
    assert run_tool_call(call(name, arguments)) == (name, result)


@pytest.mark.parametrize(
    "tool_call, message",
    [
        (call("compare", "{'a': 9.11, 'b': 9.9}"), "not valid JSON"),
        (call("add", "__import__('os').getcwd()"), "not valid JSON"),
        (call("add", None), "not valid JSON"),
        (call("add", '{"a": 1}'), "arguments must be ['a', 'b']"),
        (call("add", '[1, 2]'), "arguments must be ['a', 'b']"),
        (call("add", '{"a": true, "b": 1}'), "True is not a number"),
        (call("count_letter_in_string", '{"a": "strawberry", "b": "rr"}'), "one letter"),
        (call("pow", '{"a": 1, "b": 2}'), "does not name one of the offered functions"),
        ("functions.add:0", "does not name one of the offered functions"),
    ],
)
def test_unusable_tool_calls_fail_the_check(tool_call, message):
    with pytest.raises(CheckFailed, match=message.replace("[", r"\[").replace("]", r"\]")):
        run_tool_call(tool_call)


@pytest.mark.parametrize(
    "answer, right",
    [
        ("9.9 is larger than 9.11.", True),
        ("The larger number is 9.9", True),
        ("9.11 is larger than 9.9", False),
        ("The answer is 9.11.", False),
        ("9.99 is larger", False),
    ],
)
def test_the_compare_answer_must_name_9_9(answer, right):
    assert says_nine_point_nine(answer) is right


@pytest.mark.parametrize(
    "model_id, is_path",
    [
        ("/root/autodl-fs/moonshotai/Kimi-K2.5", True),
        ("./Kimi-K2.5", True),
        ("../Kimi-K2.5", True),
        ("~/Kimi-K2.5", True),
        ("data/models/Kimi-K2.5", True),
        ("kimi-k2.5", False),
        ("moonshotai/Kimi-K2.5", False),
    ],
)
def test_model_ids_that_are_paths(model_id, is_path):
    assert looks_like_path(model_id) is is_path


@pytest.mark.parametrize(
    "answer, right",
    [("42", True), (" **42**.", True), ("`42`", True), ("42 is the answer", False), ("4 2", False),
     ("ulations 42 mor", False), ("", False)],
)
def test_the_sum_answer_must_be_the_number_only(answer, right):
    assert is_number_only(answer, "42") is right


@pytest.mark.parametrize(
    "max_model_len, wanted, sent",
    [(None, 4096, 4096), (262144, 4096, 4096), (4096, 4096, 3072), (2048, 4096, 1024), (2048, 256, 256),
     (512, 4096, 256), (1, 4096, 1)],
)
def test_max_tokens_fit_the_context(max_model_len, wanted, sent):
    chat = ChatFacts.of(load_catalog().recipe)
    verifier = Verifier(server=None, model="m", expected_model=None, features=frozenset(), chat=chat)
    verifier.max_model_len = max_model_len
    assert verifier.budget(wanted) == sent


@pytest.mark.parametrize(
    "body, message",
    [
        (b'{"error": {"message": "bad", "type": "BadRequestError", "param": null, "code": 400}}', "bad"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b"<html>oops</html>", "<html>oops</html>"),
    ],
)
def test_error_messages_are_read_from_vllms_nested_shape(body, message):
    assert error_message(body) == message


def test_reply_reads_vllms_field_names_only():
    message = {"content": None, "reasoning_content": "r"}
    reply = Reply.parse({"choices": [{"message": message, "finish_reason": "stop"}]})
    assert (reply.content, reply.reasoning, reply.tool_calls) == ("", "", [])


def sample_report(*statuses: str) -> VerifyReport:
    checks = tuple(ServerCheck(f"check{i}", s, f"message {i}", 12.3, 7) for i, s in enumerate(statuses))
    return VerifyReport("http://127.0.0.1:8000", "kimi-k2.5", checks)


def test_a_server_check_is_cores_check_record():
    check = ServerCheck("health", PASS, "/health answered 200", 3.0)
    assert isinstance(check, Check) and check.tokens is None


def test_report_is_ok_unless_a_check_fails():
    assert sample_report(PASS, SKIP).ok
    assert not sample_report(PASS, FAIL, SKIP).ok


def test_report_as_json_and_text():
    report = sample_report(PASS, FAIL)
    data = json.loads(json.dumps(report.to_json()))
    assert data["ok"] is False and data["model"] == "kimi-k2.5"
    assert data["checks"][1] == {
        "check": "check1", "status": "fail", "message": "message 1", "latency_ms": 12.3, "tokens": 7,
    }
    lines = report.to_text().splitlines()
    assert lines[0] == "kimi-serve verify http://127.0.0.1:8000 (model: kimi-k2.5)"
    assert lines[1].split() == ["CHECK", "STATUS", "LATENCY", "TOKENS", "MESSAGE"]
    assert lines[3].split() == ["check1", "FAIL", "12", "ms", "7", "message", "1"]
    assert lines[-1] == "FAILED: 1 passed, 1 failed, 0 skipped"
