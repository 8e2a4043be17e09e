"""run_verify against the stand-in server: healthy, partly configured and broken servers."""

import time

import pytest
from standin_server import MODEL_PATH, SERVED_NAME

from entrypoint.core.data.recipe import load_catalog
from entrypoint.verify.checks import ChatFacts
from entrypoint.verify.report import FAIL, PASS, SKIP
from entrypoint.verify.run import run_verify

ALL_CHECKS = [
    "health", "models", "chat_thinking", "chat_instant",
    "tools_count_letter", "tools_compare", "image", "streaming",
]
TOOLS_AND_REASONING = frozenset({"tool_calling", "reasoning"})
PARSER_HINTS = ("--reasoning-parser", "--tool-call-parser")


def verify(url, *, model=None, expected_model=SERVED_NAME, features=TOOLS_AND_REASONING, timeout=2.0,
           recipe="kimi-k2.5"):
    """run_verify with the expectations of a recipe of the real data (Kimi-K2.5's: what the
    stand-in server plays, unless a test names another)."""
    chat = ChatFacts.of(load_catalog().recipes[recipe])
    return run_verify(url, model=model, expected_model=expected_model, features=features, timeout=timeout, chat=chat)


def by_name(report):
    return {check.name: check for check in report.checks}


def failed_saying(check, *phrases, never=()) -> bool:
    """The check failed, its message has every phrase and none of `never`."""
    return (check.status == FAIL and all(p in check.message for p in phrases)
            and not any(p in check.message for p in never))


def test_healthy_server_passes_every_check(standin):
    server = standin("ok")
    report = verify(server.url)
    assert [c.name for c in report.checks] == ALL_CHECKS
    assert {c.name: c.status for c in report.checks} == dict.fromkeys(ALL_CHECKS, PASS), report.to_text()
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
    assert by_name(report)["tools_count_letter"].message.startswith("count_letter_in_string -> ")


def test_thinking_and_instant_modes_are_requested(standin):
    server = standin("ok")
    verify(server.url)
    thinking, instant = server.chat_bodies()[:2]
    assert thinking["chat_template_kwargs"] == {"thinking": True}
    assert instant["chat_template_kwargs"] == {"thinking": False}


def test_checks_for_features_that_are_off_are_skipped_with_why(standin):
    server = standin("text_only")
    report = verify(server.url, features=frozenset({"text_only"}))
    checks = by_name(report)
    assert checks["chat_thinking"].status == SKIP and "reasoning feature is off" in checks["chat_thinking"].message
    assert checks["tools_compare"].status == SKIP and "tool_calling feature is off" in checks["tools_compare"].message
    assert checks["image"].status == SKIP and "text_only is on" in checks["image"].message
    assert report.ok
    assert not any("tools" in body or isinstance(body["messages"][0]["content"], list)
                   for body in server.chat_bodies())


def test_image_on_a_text_only_model_fails_with_the_servers_reason(standin):
    image = by_name(verify(standin("text_only").url))["image"]
    assert image.status == FAIL
    assert "HTTP 400" in image.message and "not a multimodal model" in image.message
    assert "text_only" in image.message


PLAIN = "kimi-linear-48b-a3b-instruct"  # a recipe with no features and a text-only model


def test_a_plain_chat_model_passes_what_it_must_and_skips_the_rest_with_why(standin):
    """No tool or reasoning parser, no vision (the recipe's tasks): health, the model name, an
    instant answer and a stream must still pass; nothing asks for thinking, tools or an image."""
    server = standin("plain")
    report = verify(server.url, features=frozenset(), recipe=PLAIN)
    statuses = {c.name: c.status for c in report.checks}
    assert statuses == {"health": PASS, "models": PASS, "chat_thinking": SKIP, "chat_instant": PASS,
                        "tools_count_letter": SKIP, "tools_compare": SKIP, "image": SKIP, "streaming": PASS}, \
        report.to_text()
    assert "takes text only" in by_name(report)["image"].message and report.ok
    bodies = server.chat_bodies()
    assert bodies and not any("tools" in b or "chat_template_kwargs" in b or isinstance(b["messages"][0]["content"],
                                                                                       list) for b in bodies)


def test_a_plain_chat_model_still_fails_a_wrong_answer(standin):
    """The checks a plain model keeps are real: a server answering gibberish fails them."""
    checks = by_name(verify(standin("random").url, features=frozenset(), recipe=PLAIN))
    assert checks["chat_instant"].status == FAIL and checks["streaming"].status == FAIL


def test_the_image_check_runs_on_a_multimodal_recipe_only():
    from entrypoint.verify.checks import skip_reason

    recipes = load_catalog().recipes
    assert skip_reason("image", frozenset(), ChatFacts.of(recipes["kimi-k2.5"])) is None
    assert "takes text only" in skip_reason("image", frozenset(), ChatFacts.of(recipes["kimi-k2-thinking"]))
    assert "takes text only" in skip_reason("image", frozenset(), ChatFacts.of(recipes[PLAIN]))


# --- Why (issue 15): a wrong server must not pass ------------------------------------------------


def test_random_split_of_gibberish_fails_the_thinking_check(standin):
    """A gibberish model whose random </think> split its text passed chat_thinking (1 run in 4)."""
    checks = by_name(verify(standin("random").url))
    assert failed_saying(checks["chat_thinking"], "does not give 42", "possible causes", never=PARSER_HINTS)
    for name in ("chat_instant", "streaming"):
        assert checks[name].status == FAIL and "does not give 42" in checks[name].message, name


def test_gibberish_with_both_parsers_on_names_no_parser(standin):
    """The hints asserted a missing parser when both parsers were on and the model was wrong."""
    checks = by_name(verify(standin("random").url))
    for name in ("tools_count_letter", "tools_compare"):
        assert failed_saying(checks[name], "no tool call", "possible causes", never=PARSER_HINTS), checks[name]


def test_a_call_of_a_function_never_offered_names_the_model_not_the_parsers(standin):
    """ci18 (the real random model): the parser read gibberish as a call of a function that was not
    offered; the check fails with the model's possible causes, never a parser hint."""
    checks = by_name(verify(standin("random_tool_call").url))
    for name in ("tools_count_letter", "tools_compare"):
        assert failed_saying(checks[name], "does not name one of the offered functions", "possible causes",
                             never=PARSER_HINTS), checks[name]


def test_requests_fit_a_small_context(standin):
    """Every tool and thinking check asked for 4096 max_tokens: a 2048-token server answered 400."""
    server = standin("small_context")
    report = verify(server.url)
    assert report.ok, report.to_text()
    assert "max_model_len 2048" in by_name(report)["models"].message
    assert max(body["max_tokens"] for body in server.chat_bodies()) <= 2048


def test_a_check_has_one_deadline_for_all_its_reads(standin):
    """--timeout bounded each read, so a server dripping bytes passed a 1 s check after 1.7 s."""
    server = standin("drip")
    start = time.monotonic()
    checks = by_name(verify(server.url, timeout=0.5))
    assert time.monotonic() - start < 3.0
    assert checks["health"].status == PASS  # an empty body needs no time
    assert checks["models"].status == FAIL
    assert "no complete answer within the check's 0.5 s" in checks["models"].message
    assert checks["models"].latency_ms < 2000  # a bound per read would take the whole drip (~15 s)


@pytest.mark.parametrize("expected", [MODEL_PATH, None])
def test_path_hint_never_advises_a_path(standin, expected):
    """With --expect-model /path, the hint advised --served-model-name /path."""
    models = by_name(verify(standin("path_model").url, expected_model=expected))["models"]
    assert failed_saying(models, "is a path", "--served-model-name NAME", never=[f"--served-model-name {MODEL_PATH}"])


def test_reasoning_inline_in_content_names_the_reasoning_parser(standin):
    checks = by_name(verify(standin("no_parsers").url))
    assert failed_saying(checks["chat_thinking"], "inside content", "--reasoning-parser kimi_k2")
    assert checks["chat_instant"].status == PASS


def test_tools_without_a_tool_parser_name_the_tool_parser(standin):
    checks = by_name(verify(standin("no_parsers").url))
    for name in ("tools_count_letter", "tools_compare"):
        assert failed_saying(checks[name], "HTTP 400", "--tool-call-parser kimi_k2"), checks[name]


def test_tool_call_returned_as_text_names_the_tool_parser(standin):
    report = verify(standin("wrong_tool_parser").url)
    checks = by_name(report)
    for name in ("tools_count_letter", "tools_compare"):
        assert failed_saying(checks[name], "came back as text", "--tool-call-parser kimi_k2"), checks[name]
    assert checks["chat_thinking"].status == PASS
    assert not report.ok


def test_instant_mode_that_still_reasons_fails(standin):
    checks = by_name(verify(standin("always_thinks").url))
    assert checks["chat_instant"].status == FAIL
    assert "still reasoned" in checks["chat_instant"].message
    assert checks["chat_thinking"].status == PASS


# --- names ---------------------------------------------------------------------------------------


def test_path_as_model_name_fails_with_the_way_out(standin):
    report = verify(standin("path_model").url)
    checks = by_name(report)
    assert checks["models"].status == FAIL
    assert MODEL_PATH in checks["models"].message
    assert "--served-model-name kimi-k2.5" in checks["models"].message
    # The other checks still run, with the name the server lists.
    assert report.model == MODEL_PATH
    assert checks["chat_instant"].status == PASS


def test_served_name_other_than_the_configured_one_fails(standin):
    checks = by_name(verify(standin("ok").url, expected_model="kimi-k2.5-int4"))
    assert checks["models"].status == FAIL
    assert "'kimi-k2.5'" in checks["models"].message and "'kimi-k2.5-int4'" in checks["models"].message


def test_model_to_send_must_be_the_served_one(standin):
    checks = by_name(verify(standin("ok").url, model="other", expected_model=None))
    assert checks["models"].status == FAIL and "'other'" in checks["models"].message
    instant = checks["chat_instant"]
    assert instant.status == FAIL and "HTTP 404" in instant.message and "Valid aliases: kimi-k2.5" in instant.message


# --- broken servers ------------------------------------------------------------------------------


def test_hanging_server_fails_on_timeout_without_waiting_for_every_check(standin):
    server = standin("hang")
    start = time.monotonic()
    report = verify(server.url, timeout=0.5)
    assert time.monotonic() - start < 2.5
    checks = by_name(report)
    assert checks["health"].status == FAIL and "no complete answer within the check's 0.5 s" in checks["health"].message
    assert all(checks[n].status == FAIL and checks[n].message.startswith("not run") for n in ALL_CHECKS[1:])


def test_endless_answer_fails_at_the_size_cap(standin):
    health = by_name(verify(standin("huge").url, timeout=20))["health"]
    assert health.status == FAIL and "larger than 8 MiB" in health.message


def test_refused_connection_is_not_ready(closed_port_url):
    report = verify(closed_port_url, timeout=1.0)
    checks = by_name(report)
    assert checks["health"].status == FAIL and "cannot connect" in checks["health"].message
    assert "not ready: the server is not running or still starting" in checks["health"].message
    assert checks["models"].message == "not run: the server is not ready (/health failed)"
    assert not report.ok


def test_garbage_model_list_fails_and_blocks_the_chat_checks(standin):
    checks = by_name(verify(standin("garbage").url))
    assert checks["models"].status == FAIL and "not JSON" in checks["models"].message
    assert checks["chat_instant"].status == FAIL and "pass --model" in checks["chat_instant"].message


def test_garbage_chat_answers_fail_each_chat_check(standin):
    checks = by_name(verify(standin("garbage").url, model=SERVED_NAME))
    for name in ALL_CHECKS[2:]:
        assert checks[name].status == FAIL, name
        assert "not JSON" in checks[name].message, name


def test_stream_without_finish_reason_fails(standin):
    checks = by_name(verify(standin("stream_no_finish").url))
    assert checks["streaming"].status == FAIL
    assert "without a finish_reason" in checks["streaming"].message


@pytest.mark.slow
def test_streaming_reports_its_longest_silence_and_warns_near_the_proxies_timeout(standin):
    """Issue 38: verify measures the longest gap between a stream's chunks and warns when it nears what
    the rendered proxies wait (recipes/serving.yaml streams.idle_timeout_s)."""
    url = standin("silent_stream").url
    recipe = load_catalog().recipes["kimi-k2.5"]
    quiet = by_name(run_verify(url, model=None, expected_model=SERVED_NAME, features=TOOLS_AND_REASONING, timeout=5.0,
                               chat=ChatFacts.of(recipe, idle_timeout_s=600)))["streaming"]
    assert quiet.status == PASS and "longest gap between chunks 1." in quiet.message and "warning" not in quiet.message
    near = by_name(run_verify(url, model=None, expected_model=SERVED_NAME, features=TOOLS_AND_REASONING, timeout=5.0,
                              chat=ChatFacts.of(recipe, idle_timeout_s=2)))["streaming"]
    assert near.status == PASS and "warning: that is near the 2 s a proxy in front waits" in near.message
    steady = by_name(verify(standin("ok").url))["streaming"]
    assert "longest gap between chunks 0.0 s" in steady.message


def test_openai_base_url_is_accepted(standin):
    server = standin("ok")
    report = verify(server.url + "/v1/")
    assert report.ok and report.url == server.url
