"""Issue 20 ("Edges, round three"): each repro as a test that failed on the code before it, with
the class it belongs to checked beside it (other spellings, other sources, other outputs).

In-process through `main` (tests/edges/harness.py) unless a real deadline or subprocess matters."""

from __future__ import annotations

import json

import pytest

from .harness import base_env, run_cli

H200 = {"KIMI_HARDWARE": "h200"}
SECRET = "sk-live-999-SECRET"


def one_line_error(result, *words):
    result.assert_clean({2})
    assert "kimi-serve: error:" in result.err, result.err
    for word in words:
        assert word in result.err, result.err
    return result


def no_secret(result, secret=SECRET):
    assert secret not in result.text, result.text[-2000:]
    return result


# ---------------------------------------------------------------- 2, 3, 13: every spelling masked in every output


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("name", ["SM_VLLM_API_KEY", "SM_VLLM_API_K", "SM_VLLM_HF_TOKEN"])
def test_platform_flag_variables_are_masked_in_explain(fmt, name):
    env = base_env(**H200, KIMI_PLATFORM="sagemaker", **{name: SECRET})
    result = no_secret(run_cli(["explain", "--format", fmt], env).assert_clean({0}))
    assert "****" in result.out
    for command in (["print"], ["plan"], ["doctor"], ["plan", "--format", "json"]):
        no_secret(run_cli(command, env).assert_clean({0, 1}))


SPELLINGS = ["--api_key {s}", "--api_key={s}", "--hf_token {s}", "--hf-tok={s}", "--api-k '{s}'", "--api-ke \"{s}\"",
             "--api-key   {s}", "x --hf_token={s} y"]


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("setting", ["KIMI_VARIANT", "KIMI_NODES", "KIMI_VLLM_VERSION", "KIMI_PREFLIGHT",
                                     "KIMI_CACHE_DIR", "KIMI_NAME"])
def test_a_key_typed_into_any_setting_is_masked_in_its_error(setting, spelling):
    env = base_env(**H200, **{setting: spelling.format(s=SECRET)})
    for command in (["print"], ["plan", "--format", "k8s"]):
        no_secret(one_line_error(run_cli(command, env)))
    no_secret(one_line_error(run_cli(["print"], {**env, "KIMI_LOG_FORMAT": "json"})))


@pytest.mark.parametrize("spelling", ["--api_key {s}", "--api-k={s}", "--hf_tok {s}"])
def test_abbreviated_and_underscored_keys_are_masked_in_the_launch(spelling):
    env = base_env(**H200, KIMI_EXTRA_ARGS=spelling.format(s=SECRET), KIMI_PREFLIGHT="off", KIMI_DRY_RUN="1")
    for command in (["print"], ["print", "--format", "json"], ["plan", "--format", "json"], ["explain"], []):
        no_secret(run_cli(command, env).assert_clean({0}))


def test_a_password_in_the_verify_url_is_masked():
    secret = "pa55-SECRET-word"
    for fmt in ("text", "json"):
        result = run_cli(["verify", "--url", f"http://user:{secret}@127.0.0.1:9", "--timeout", "2",
                          "--expect-model", "m", "--features", "", "--format", fmt], base_env(**H200))
        no_secret(result.assert_clean({1}), secret)
        assert "user:****@127.0.0.1" in result.out
