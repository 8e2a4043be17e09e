"""`kimi-serve verify` through click: options, output formats, exit codes, configured defaults."""

import json
import types

from click.testing import CliRunner
from standin_server import SERVED_NAME

from entrypoint.cli.verify import command
from entrypoint.core.base.errors import MISSING_SETTING, KimiError


def invoke(*args: str):
    return CliRunner().invoke(command, list(args))


def test_json_output_and_exit_0_for_a_healthy_server(standin):
    server = standin("ok")
    result = invoke("--url", server.url, "--expect-model", SERVED_NAME,
                    "--features", "tool_calling, reasoning", "--format", "json", "--timeout", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["url"] == server.url
    assert [c["status"] for c in data["checks"]] == ["pass"] * 8


def test_text_output_and_exit_1_when_a_check_fails(standin):
    server = standin("wrong_tool_parser")
    result = invoke("--url", server.url, "--expect-model", SERVED_NAME,
                    "--features", "tool_calling,reasoning", "--timeout", "2")
    assert result.exit_code == 1
    assert "tools_compare       FAIL" in result.output
    assert result.output.rstrip().endswith("FAILED: 6 passed, 2 failed, 0 skipped")


def test_empty_feature_list_skips_the_feature_checks(standin):
    server = standin("ok")
    result = invoke("--url", server.url, "--expect-model", SERVED_NAME, "--features", "", "--timeout", "2")
    assert result.exit_code == 0, result.output
    assert "OK: 5 passed, 0 failed, 3 skipped" in result.output  # image runs: text_only is off


def test_unknown_feature_is_a_usage_error(standin):
    result = invoke("--url", "http://127.0.0.1:9", "--expect-model", SERVED_NAME, "--features", "tool_call")
    assert result.exit_code == 2
    assert "kimi-serve: error: --features='tool_call' is not known" in result.output
    assert "Did you mean 'tool_calling'?" in result.output


def test_refused_connection_exits_1_without_a_traceback(closed_port_url):
    result = invoke("--url", closed_port_url, "--expect-model", SERVED_NAME, "--features", "", "--timeout", "1")
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "cannot connect" in result.output


def fake_context(monkeypatch, service_expectations) -> None:
    """The configured service as `service_expectations()` gives it, in place of the launch's."""
    from entrypoint.app import verify as app_verify

    def verify_targets(expected: bool, fleet: bool):
        return app_verify.VerifyTargets(service_expectations() if expected else None, None)

    monkeypatch.setattr(app_verify, "verify_targets", verify_targets)


def test_unset_options_come_from_the_configured_service(standin, monkeypatch):
    server = standin("ok")
    expected = types.SimpleNamespace(url=server.url, served_model_name="kimi-k2.5-int4",
                                     features=frozenset({"text_only"}))
    fake_context(monkeypatch, lambda: expected)
    result = invoke("--format", "json", "--timeout", "2")
    data = json.loads(result.stdout)
    statuses = {c["check"]: c["status"] for c in data["checks"]}
    assert data["url"] == server.url
    assert statuses["models"] == "fail"  # the configured name, not the served one, is expected
    assert statuses["image"] == "skip" and statuses["tools_compare"] == "skip"
    assert result.exit_code == 1


def test_bad_settings_are_reported_with_exit_2(monkeypatch):
    def broken():
        raise KimiError(MISSING_SETTING, "KIMI_HARDWARE is not set.")

    fake_context(monkeypatch, broken)
    result = invoke("--expect-model", SERVED_NAME)
    assert result.exit_code == 2
    assert "kimi-serve: error: KIMI_HARDWARE is not set." in result.output


def test_a_recipe_without_features_verifies_as_a_plain_chat_model(standin, monkeypatch):
    """KIMI_RECIPE of a recipe with no features and a text-only model (Kimi-Linear), its launch's
    real expectations (entrypoint.app.verify.expectations): the plain checks pass, the rest skip."""
    server = standin("plain")
    host, port = server.url.rsplit("/", 1)[-1].rsplit(":", 1)
    for name, value in {"KIMI_RECIPE": "kimi-linear-48b-a3b-instruct", "KIMI_HARDWARE": "h200", "KIMI_HOST": host,
                        "KIMI_PORT": port, "KIMI_SERVED_MODEL_NAME": SERVED_NAME}.items():
        monkeypatch.setenv(name, value)
    result = invoke("--format", "json", "--timeout", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["url"] == server.url
    statuses = {c["check"]: c["status"] for c in data["checks"]}
    assert statuses == {"health": "pass", "models": "pass", "chat_thinking": "skip", "chat_instant": "pass",
                        "tools_count_letter": "skip", "tools_compare": "skip", "image": "skip", "streaming": "pass"}
    result = invoke("--features", "reasoning", "--url", server.url)
    assert result.exit_code == 2 and "has no features" in result.output and "Valid values: ." not in result.output
