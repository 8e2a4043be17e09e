"""run_verify against the stand-in server: healthy, partly configured and broken servers."""

import time

from standin_server import MODEL_PATH, SERVED_NAME

from entrypoint.verify.checks import FAIL, PASS, SKIP, run_verify

ALL_CHECKS = [
    "health", "models", "chat_thinking", "chat_instant",
    "tools_count_letter", "tools_compare", "image", "streaming",
]
TOOLS_AND_REASONING = frozenset({"tool_calling", "reasoning"})


def verify(url, *, model=None, expected_model=SERVED_NAME, features=TOOLS_AND_REASONING, timeout=2.0):
    return run_verify(url, model=model, expected_model=expected_model, features=features, timeout=timeout)


def by_name(report):
    return {check.name: check for check in report.checks}


def test_healthy_server_passes_every_check(standin):
    server = standin("ok")
    report = verify(server.url)
    assert [c.name for c in report.checks] == ALL_CHECKS
    assert {c.name: c.status for c in report.checks} == dict.fromkeys(ALL_CHECKS, PASS)
    assert report.ok and report.model == SERVED_NAME
    checks = by_name(report)
    assert checks["health"].tokens is None
    assert all(checks[name].tokens > 0 for name in ALL_CHECKS[2:])
    assert all(c.latency_ms is not None and c.latency_ms >= 0 for c in report.checks)


def test_model_name_is_read_from_the_model_list(standin):
    server = standin("ok")
    verify(server.url, expected_model=None)
    assert {body["model"] for body in server.chat_bodies()} == {SERVED_NAME}


def test_tool_results_are_computed_locally_and_sent_back(standin):
    server = standin("ok")
    report = verify(server.url)
    offered = {t["function"]["name"] for t in server.chat_bodies()[2]["tools"]}
    assert offered == {"add", "mul", "compare", "count_letter_in_string"}
    tool_messages = [m for body in server.chat_bodies() for m in body["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [
        "The letter 'r' appears 3 times in 'strawberry'.",
        "9.9 is greater than 9.11",
    ]
    assert by_name(report)["tools_count_letter"].detail.startswith("count_letter_in_string -> ")


def test_thinking_and_instant_modes_are_requested(standin):
    server = standin("ok")
    verify(server.url)
    thinking, instant = server.chat_bodies()[:2]
    assert thinking["chat_template_kwargs"] == {"thinking": True}
    assert instant["chat_template_kwargs"] == {"thinking": False}


def test_newer_reasoning_field_name_is_accepted(standin):
    report = verify(standin("reasoning_field").url)
    assert by_name(report)["chat_thinking"].status == PASS


def test_checks_for_features_that_are_off_are_skipped_with_why(standin):
    server = standin("ok")
    report = verify(server.url, features=frozenset({"text_only"}))
    checks = by_name(report)
    assert checks["chat_thinking"].status == SKIP and "reasoning feature is off" in checks["chat_thinking"].detail
    assert checks["tools_compare"].status == SKIP and "tool_calling feature is off" in checks["tools_compare"].detail
    assert checks["image"].status == SKIP and "text_only is on" in checks["image"].detail
    assert report.ok
    assert not any("tools" in body or isinstance(body["messages"][0]["content"], list)
                   for body in server.chat_bodies())


def test_reasoning_left_in_content_fails_the_thinking_check(standin):
    checks = by_name(verify(standin("think_in_content").url))
    assert checks["chat_thinking"].status == FAIL
    assert "<think> markup" in checks["chat_thinking"].detail
    assert "--reasoning-parser kimi_k2" in checks["chat_thinking"].detail
    assert checks["chat_instant"].status == PASS


def test_instant_mode_that_still_reasons_fails(standin):
    checks = by_name(verify(standin("always_thinks").url))
    assert checks["chat_instant"].status == FAIL
    assert "still returned reasoning" in checks["chat_instant"].detail
    assert checks["chat_thinking"].status == PASS


def test_tool_call_returned_as_text_fails_the_tool_checks(standin):
    report = verify(standin("tool_as_text").url)
    checks = by_name(report)
    for name in ("tools_count_letter", "tools_compare"):
        assert checks[name].status == FAIL
        assert "no structured tool call" in checks[name].detail
        assert "--tool-call-parser kimi_k2" in checks[name].detail
    assert checks["chat_instant"].status == PASS
    assert not report.ok


def test_path_as_model_name_fails_with_the_way_out(standin):
    report = verify(standin("path_model").url)
    checks = by_name(report)
    assert checks["models"].status == FAIL
    assert MODEL_PATH in checks["models"].detail
    assert "--served-model-name kimi-k2.5" in checks["models"].detail
    # The other checks still run, with the name the server lists.
    assert report.model == MODEL_PATH
    assert checks["chat_instant"].status == PASS


def test_served_name_other_than_the_configured_one_fails(standin):
    checks = by_name(verify(standin("ok").url, expected_model="kimi-k2.5-int4"))
    assert checks["models"].status == FAIL
    assert "'kimi-k2.5'" in checks["models"].detail and "'kimi-k2.5-int4'" in checks["models"].detail


def test_model_to_send_must_be_the_served_one(standin):
    checks = by_name(verify(standin("ok").url, model="other", expected_model=None))
    assert checks["models"].status == FAIL and "'other'" in checks["models"].detail
    assert checks["chat_instant"].status == FAIL and "HTTP 404" in checks["chat_instant"].detail


def test_hanging_server_fails_on_timeout_without_waiting_for_every_check(standin):
    server = standin("hang")
    start = time.monotonic()
    report = verify(server.url, timeout=0.5)
    assert time.monotonic() - start < 2.5
    checks = by_name(report)
    assert checks["health"].status == FAIL and "no answer within 0.5 s" in checks["health"].detail
    assert all(checks[n].status == FAIL and checks[n].detail.startswith("not run") for n in ALL_CHECKS[1:])


def test_refused_connection_is_a_failed_check(closed_port_url):
    report = verify(closed_port_url, timeout=1.0)
    health = by_name(report)["health"]
    assert health.status == FAIL and "cannot connect" in health.detail
    assert not report.ok


def test_garbage_model_list_fails_and_blocks_the_chat_checks(standin):
    checks = by_name(verify(standin("garbage").url))
    assert checks["models"].status == FAIL and "not JSON" in checks["models"].detail
    assert checks["chat_instant"].status == FAIL and "pass --model" in checks["chat_instant"].detail


def test_garbage_chat_answers_fail_each_chat_check(standin):
    checks = by_name(verify(standin("garbage").url, model=SERVED_NAME))
    for name in ALL_CHECKS[2:]:
        assert checks[name].status == FAIL, name
        assert "not JSON" in checks[name].detail, name


def test_stream_without_finish_reason_fails(standin):
    checks = by_name(verify(standin("stream_no_finish").url))
    assert checks["streaming"].status == FAIL
    assert "without a finish_reason" in checks["streaming"].detail


def test_openai_base_url_is_accepted(standin):
    server = standin("ok")
    report = verify(server.url + "/v1/")
    assert report.ok and report.url == server.url
