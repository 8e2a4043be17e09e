"""Issue 40, the mask's false positives: a variable is secret-named by the whole `_`-delimited words
of its name, never a substring (TOKENIZERS_PARALLELISM held TOKEN, and its `false` was then masked
in every rendered file, which was refused), and a boolean or a short number is never a secret to
look for in output. Held over every recorded vLLM release's own variable names, the chart's
schema, and the real commands."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from entrypoint.core.vllm.mask import MASK, is_secret_name, mask_output, secret_values, written_secret
from tests.edges.harness import base_env, run_proc

ROOT = Path(__file__).resolve().parents[2]
RELEASES = sorted((ROOT / "recipes" / "vllm").glob("*.json"))
H200 = {"KIMI_HARDWARE": "h200"}
TOKEN = "hf_abcdefgh123"

# vLLM's own variables that really hold a secret, and why (every other name of every release is a knob)
VLLM_SECRETS = {
    "VLLM_API_KEY": "the key clients present to the OpenAI-compatible server",
    "S3_SECRET_ACCESS_KEY": "the secret half of the S3 key pair vLLM's object-store loader signs with",
    "S3_ACCESS_KEY_ID": "the id half of that key pair: credential material, given from a secret store with its secret",
}

REAL_SECRETS = [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN",
    "OPENAI_API_KEY", "VLLM_API_KEY", "KIMI_API_KEY", "WANDB_API_KEY", "NGC_API_KEY", "AZURE_CLIENT_SECRET",
    "GITHUB_TOKEN", "GH_TOKEN", "VAULT_TOKEN", "DB_PASSWORD", "PGPASSWORD_X_PASSWD", "MYSQL_ROOT_PASSWORD",
    "SSH_PRIVATE_KEY", "DJANGO_SECRET_KEY", "SECRET_KEY_BASE", "AZURE_STORAGE_ACCESS_KEY", "REGISTRY_CREDENTIALS",
    "SERVICE_CREDENTIAL", "TOKEN", "SECRET", "hf_token", "my_api_key", "Openai_Api_Key", "GITHUB_TOKEN_2",
]

NOT_SECRETS = [
    "TOKENIZERS_PARALLELISM", "VLLM_USE_FASTOKENS", "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE",
    "VLLM_MAX_BAD_WORDS_TOTAL_TOKENS", "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD", "SERVER_MAX_TOKENS",
    "MAX_NUM_TOKENS", "VLLM_NUM_TOKENS", "TOKENIZER_MODE", "TOKENIZER_POOL_SIZE", "BOS_TOKEN_ID",
    "TOKEN_BUDGET", "MAX_TOKEN_LEN", "KEY_CACHE_DTYPE", "API_BASE_URL", "VLLM_SECRETARY",  # no word is SECRET
    "PASSWORDLESS_LOGIN", "CREDENTIALING_MODE", "APIKEYS_HINT",
    # the path of a secret, not one: the value is written down (the file's content is the secret)
    "HF_TOKEN_PATH", "GOOGLE_APPLICATION_CREDENTIALS", "DB_PASSWORD_FILE", "SSH_PRIVATE_KEY_DIR",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
]
# a variable the chart gives its containers itself: extraEnv refuses it as a duplicate (tests/chart/test_chart.py)
CHART_GIVES = {"HF_TOKEN_PATH"}


def vllm_names() -> dict:
    """{release: its variable names} of every recorded vLLM release."""
    return {path.stem: json.loads(path.read_text())["env"] for path in RELEASES}


def test_every_recorded_release_is_read():
    names = vllm_names()
    assert len(names) >= 4 and {"0.19.1", "0.33.0", "0.34.0"} <= set(names)
    assert all(len(env) > 200 for env in names.values())


@pytest.mark.parametrize("release", [path.stem for path in RELEASES])
def test_no_vllm_variable_is_a_secret_but_the_real_ones(release):
    env = vllm_names()[release]
    secret = sorted(name for name in env if is_secret_name(name))
    assert secret == sorted(name for name in VLLM_SECRETS if name in env), secret


def test_the_vllm_secrets_listed_are_vllm_names():
    """Each name the list excuses is still one of vLLM's (the list cannot outlive the releases)."""
    every = set().union(*vllm_names().values())
    assert set(VLLM_SECRETS) <= every
    # the knobs that the substring rule called secrets, among vLLM's own names
    for knob in ("VLLM_USE_FASTOKENS", "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", "VLLM_MAX_BAD_WORDS_TOTAL_TOKENS",
                 "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD", "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD"):
        assert knob in every and not is_secret_name(knob)


@pytest.mark.parametrize("name", REAL_SECRETS)
def test_a_real_secret_stays_secret(name):
    assert is_secret_name(name)
    assert mask_output(f"{name}=s3cr3t-Value-40", {name: "s3cr3t-Value-40"}) == f"{name}={MASK}"


@pytest.mark.parametrize("name", NOT_SECRETS)
def test_a_knob_is_no_secret(name):
    assert not is_secret_name(name)
    assert mask_output("value: v-Knob-40", {name: "v-Knob-40"}) == "value: v-Knob-40"


# ---------------------------------------------------------------- values never hunted

@pytest.mark.parametrize("value", ["true", "false", "True", "FALSE", "yes", "No", "on", "OFF", " true ",
                                   "8000", "10001", "65534", "1234"])
def test_a_boolean_or_a_short_number_is_never_looked_for(value):
    environ = {"HF_TOKEN": value, "AZURE_CLIENT_SECRET": value}
    text = f"enableServiceLinks: {value.strip()}\nport: {value.strip()}\n"
    assert secret_values(environ) == []
    assert mask_output(text, environ) == text and written_secret(text, environ) == ""


@pytest.mark.parametrize("value", ["123456", "0123456789", "truex", "hf_true", "offline-key", "8000a"])
def test_a_longer_number_or_any_other_word_is_still_looked_for(value):
    environ = {"DB_PASSWORD": value}
    assert secret_values(environ) == [value]
    assert value not in mask_output(f"the store said {value} twice: {value}", environ)
    assert written_secret(f"a: b\nc: {value}\n", environ).startswith("line 2:")


def test_a_short_secret_after_its_option_or_in_a_url_is_still_masked():
    """Only the bare hunt skips a plain value; the spellings that say it is a secret still mask it."""
    assert mask_output("--api-key 8000 --port 8000", {}) == f"--api-key {MASK} --port 8000"
    assert mask_output("s3://u:true@bucket/k", {}) == f"s3://u:{MASK}@bucket/k"
    assert mask_output("--api-key true", {"VLLM_API_KEY": "true"}) == f"--api-key {MASK}"


# ---------------------------------------------------------------- the chart: the same rule

def _chart_validator():
    schema = json.loads((ROOT / "charts" / "kimi-serve" / "values.schema.json").read_text())
    return jsonschema.Draft7Validator(schema)


def _chart_takes(validator, name: str) -> bool:
    values = {"settings": {"hardware": "h200"}, "extraEnv": [{"name": name, "value": "some-value"}]}
    return not list(validator.iter_errors(values))


def test_the_charts_schema_takes_a_knob_as_a_value_and_a_secret_only_from_a_secret():
    validator = _chart_validator()
    every = sorted(set().union(*vllm_names().values()))
    refused = [name for name in every if not _chart_takes(validator, name)]
    assert refused == sorted(VLLM_SECRETS), refused
    for name in REAL_SECRETS:
        assert not _chart_takes(validator, name), name
    for name in NOT_SECRETS:
        assert _chart_takes(validator, name) != (name in CHART_GIVES), name
    ref = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}}
    assert not list(validator.iter_errors({"settings": {"hardware": "h200"}, "extraEnv": [ref]}))


# ---------------------------------------------------------------- the real commands

@pytest.mark.slow
@pytest.mark.parametrize("variable, fmt, line, written", [
    ("TOKENIZERS_PARALLELISM=false", "k8s", "enableServiceLinks: false", "kubernetes.yaml"),
    ("VLLM_USE_FASTOKENS=true", "compose", "read_only: true", "compose.yaml"),
])
def test_a_tuning_knob_no_longer_refuses_the_rendering(tmp_path, variable, fmt, line, written):
    name, _, value = variable.partition("=")
    env = base_env(**H200, **{name: value})
    result = run_proc(["plan", "--format", fmt], env).assert_clean({0})
    assert line in result.out and MASK not in result.out, result.err
    run_proc(["plan", "--format", fmt, "--output", str(tmp_path)], env).assert_clean({0})
    assert line in (tmp_path / written).read_text()


def test_a_secret_whose_value_is_a_boolean_refuses_nothing():
    result = run_proc(["plan", "--format", "k8s"], base_env(**H200, HF_TOKEN="false")).assert_clean({0})
    assert "enableServiceLinks: false" in result.out


@pytest.mark.parametrize("args", [["plan"], ["plan", "--format", "json"], ["plan", "--format", "k8s"],
                                  ["plan", "--format", "compose"], ["print"], ["explain"]])
def test_the_hub_token_never_appears(args):
    result = run_proc(args, base_env(**H200, HF_TOKEN=TOKEN)).assert_clean({0})
    assert TOKEN not in result.out + result.err


@pytest.mark.parametrize("fmt", ["k8s", "compose"])
def test_a_real_secret_written_down_still_refuses_the_file(tmp_path, fmt):
    """HF_TOKEN's value in a setting the file writes (the served name): refused, exit 2, the token
    masked in the message and nothing written."""
    out = tmp_path / "out"
    env = base_env(**H200, HF_TOKEN=TOKEN, KIMI_SERVED_MODEL_NAME=TOKEN)
    result = run_proc(["plan", "--format", fmt, "--output", str(out)], env).assert_clean({2})
    assert "would write down a secret" in result.err and MASK in result.err, result.err
    assert TOKEN not in result.out + result.err
    assert not out.exists() or not any(out.iterdir())
