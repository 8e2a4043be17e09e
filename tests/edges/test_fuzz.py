"""Property/fuzz suite for issue 11: whatever the environment, the KIMI_CONFIG file, the batch
lines, the GPU tools' output or the server on the other end, kimi-serve ends with an exit code of
the documented set, one-line errors, no traceback, no internal error, no secret in any output,
within a bound (a generous bound, not a speed target).

Most examples run in this process through `main` (fast); `test_subprocess_sample` runs a few
generated environments through the real `python -m entrypoint`. Counts are set so the whole file
takes about a minute on a 2-core CI machine. Servers are 127.0.0.1 only, self-stopping."""

from __future__ import annotations

import json
import os
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from entrypoint.cli._context import REPORT_HINT
from entrypoint.core.compose.settings import KIMI_FIELDS

from .harness import base_env, run_cli, run_proc
from .servers import Server

BOUND_S = 30  # in-process: any one command; far above the real figures (tens of milliseconds)
FUZZ = settings(max_examples=int(os.environ.get("EDGE_FUZZ_EXAMPLES", "300")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
FEW = settings(FUZZ, max_examples=max(FUZZ.max_examples // 5, 10))

SECRETS = st.text(string.ascii_letters + string.digits, min_size=12, max_size=24).map(lambda s: "sk-" + s)
NAMES = [f.env for f in KIMI_FIELDS if f.name not in ("config", "recipes_dir", "debug")]
HARDWARE = ["h100", "h200", "b200", "gb200", "b300", "gb300", "mi300x", "mi325x", "mi350x", "mi355x", "auto", "x"]
# Values a user could plausibly (or adversarially) type; environment values cannot hold NUL.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
VALUES = st.one_of(
    TEXT,
    st.integers(min_value=-10 ** 6, max_value=10 ** 10).map(str),
    st.integers(min_value=5, max_value=6000).map(lambda n: "9" * n),
    st.sampled_from(["", "0", "1", "-1", "auto", "on", "off", "warn", "json", "tp", "dep", "router", "prefill",
                     "decode", "fd00::1", "10.0.0.1,10.0.0.2", "::1", "/tmp", "[", "a b", "Kimi_Prod"]),
    st.sampled_from(HARDWARE),
)


def _typo(name: str, data) -> str:
    i = data.draw(st.integers(0, len(name) - 1))
    return name[:i] + name[i + 1:]


@st.composite
def environments(draw):
    env = {}
    for name in draw(st.lists(st.sampled_from(NAMES), max_size=8, unique=True)):
        env[name] = draw(VALUES)
    if draw(st.booleans()):
        env.setdefault("KIMI_HARDWARE", draw(st.sampled_from(HARDWARE)))
    extra = draw(st.sampled_from(["", "typo", "unknown", "service-link"]))
    if extra == "typo":
        env[_typo(draw(st.sampled_from(NAMES)), draw(st.data()))] = draw(VALUES)
    elif extra == "unknown":
        env["KIMI_" + draw(st.text(string.ascii_uppercase + "_", min_size=1, max_size=12))] = draw(VALUES)
    elif extra == "service-link":
        env["KIMI_PORT_8000_TCP"] = "tcp://10.0.0.9:8000"
        env["KIMI_SERVICE_HOST"] = "10.0.0.9"
    secret = draw(SECRETS)
    where = draw(st.sampled_from(["VLLM_API_KEY", "HF_TOKEN", "extra", "extra-broken", "extra-eq", "setting",
                                  "platform"]))
    # every spelling vLLM accepts: `_` for `-`, abbreviations, `=`, quotes
    flag = draw(st.sampled_from(["--api-key", "--api_key", "--api-k", "--hf-token", "--hf_tok", "--api-ke"]))
    if where in ("VLLM_API_KEY", "HF_TOKEN"):
        env[where] = secret
    elif where == "setting":  # a key typed into the wrong setting: every error message masks it
        env[draw(st.sampled_from(NAMES))] = draw(st.sampled_from([f"{flag} {secret}", f"{flag}={secret}",
                                                                  f"{flag} '{secret}'"]))
    elif where == "platform":  # SageMaker's flag variables: SM_VLLM_API_KEY is --api-key
        env.update(KIMI_PLATFORM="sagemaker", **{"SM_VLLM_" + flag[2:].upper().replace("-", "_"): secret})
    else:
        env["KIMI_EXTRA_ARGS"] = {"extra": f"{flag} {secret}", "extra-broken": f"{flag} {secret} '",
                                  "extra-eq": f"--max-model-len 4096 {flag}={secret}"}[where]
    return env, secret


def assert_sane(result, secret: str = "") -> None:
    result.assert_clean()
    assert REPORT_HINT not in result.text, result.text[-2000:]  # an internal error is a bug
    assert result.seconds < BOUND_S
    if secret:
        assert secret not in result.text, result.text[-2000:]
    for line in result.err.splitlines():
        assert not line.startswith("  File "), result.err[-2000:]


COMMANDS = [["print"], ["print", "--format", "json"], ["plan"], ["plan", "--format", "json"],
            ["plan", "--format", "compose"], ["plan", "--format", "k8s"], ["explain", "--all"], ["doctor"], []]


@pytest.mark.slow
@FUZZ
@given(environments(), st.sampled_from(COMMANDS))
def test_generated_environments(tmp_path_factory, case, args):
    env, secret = case
    full = base_env(**{"KIMI_CACHE_DIR": str(tmp_path_factory.getbasetemp()), **env})
    if not args:  # the start: never exec in-process
        full.update(KIMI_DRY_RUN="1")
    assert_sane(run_cli(args, full), secret)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if value == value and abs(value) != float("inf") else "nan"
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


TOML_VALUES = st.recursive(
    st.one_of(st.text(max_size=30), st.integers(min_value=-(10 ** 30), max_value=10 ** 30), st.booleans(),
              st.floats(allow_nan=False), st.sampled_from(["h200", "mi355x", "/tmp", "--api-key sk-tomlsecret123"])),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12)
TOML_KEYS = st.one_of(st.sampled_from([n[len("KIMI_"):].lower() for n in NAMES]), st.text(max_size=10))


@pytest.mark.slow
@FUZZ
@given(st.one_of(
    st.dictionaries(TOML_KEYS, TOML_VALUES, max_size=6).map(
        lambda d: "\n".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in d.items()).encode()),
    st.binary(max_size=300),
    st.integers(1, 3000).map(lambda n: b"prefill_addrs = " + b"[" * n + b"]" * n)))
def test_generated_toml_files(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("toml") / "kimi.toml"
    path.write_bytes(data)
    env = base_env(KIMI_HARDWARE="h200", KIMI_CONFIG=str(path))
    # A secret is the value after --api-key (in whatever key it was written); a bare string is not.
    bare = data.count(b"sk-tomlsecret123") != data.count(b"--api-key sk-tomlsecret123")
    assert_sane(run_cli(["print"], env), "" if bare else "sk-tomlsecret123")


BATCH_LINES = st.one_of(
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" ")),
    st.dictionaries(st.sampled_from(NAMES + ["VLLM_API_KEY", "KIMI_VARIANTS", "X"]),
                    st.one_of(VALUES, st.none(), st.integers(), st.booleans(), st.lists(st.integers(), max_size=2)),
                    max_size=5).map(lambda d: json.dumps(d).encode()),
    st.integers(1, 20000).map(lambda n: b"[" * n),
    st.just(b""),
)


@pytest.mark.slow
@FUZZ
@given(st.lists(BATCH_LINES, min_size=1, max_size=6))
def test_generated_batch_lines(lines):
    stdin = (b"\n".join(lines) + b"\n").decode("utf-8", "surrogateescape")
    result = run_cli(["plan", "--batch", "-"], base_env(), stdin=stdin)
    assert_sane(result)
    out = result.out.splitlines()
    assert len(out) == len(lines)
    assert all(isinstance(json.loads(line), dict) for line in out)


NVIDIA_LINES = st.one_of(
    st.tuples(st.one_of(st.integers(0, 99).map(str), st.sampled_from(["\u00b2", "-1", "99999", "x"])),
              st.sampled_from(["NVIDIA H200", "NVIDIA B200", "", "??"]),
              st.one_of(st.integers(-5, 10 ** 7).map(str), st.integers(20, 500).map(lambda n: "9" * n),
                        st.sampled_from(["1e999", "nan", "143771 MiB", "[N/A]"])),
              st.text(max_size=12)).map(lambda t: ", ".join(t)),
    TEXT)
AMD_JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 40), 10 ** 40), st.text(max_size=10),
                                  st.floats()),
                        lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                st.dictionaries(st.sampled_from(["gpu", "asic", "vram", "size",
                                                                                 "market_name", "value", "unit",
                                                                                 "gpu_data", "card0"]),
                                                                inner, max_size=4)),
                        max_leaves=15)


@pytest.mark.slow
@FEW
@given(st.one_of(st.tuples(st.just("nvidia-smi"), st.lists(NVIDIA_LINES, max_size=70).map("\n".join)),
                 st.tuples(st.sampled_from(["amd-smi", "rocm-smi"]), AMD_JSON.map(json.dumps)),
                 st.tuples(st.sampled_from(["amd-smi", "rocm-smi"]), st.integers(1, 50000).map(lambda n: "[" * n)),
                 st.tuples(st.sampled_from(["nvidia-smi", "amd-smi"]), st.binary(max_size=200).map(
                     lambda b: b.decode("latin-1")))),
       st.sampled_from([["doctor", "--format", "json"], ["print"], []]))
def test_fake_gpu_tool_output(tmp_path_factory, tool_output, args):
    tool, text = tool_output
    root = tmp_path_factory.mktemp("tool")
    (root / "out.txt").write_text(text, encoding="utf-8", errors="surrogateescape")
    (root / tool).write_text(f"#!/bin/sh\nexec /bin/cat {root / 'out.txt'}\n")
    (root / tool).chmod(0o755)
    env = base_env(KIMI_HARDWARE="auto", KIMI_CACHE_DIR=str(root), KIMI_DRY_RUN="1")
    env["PATH"] = f"{root}:/usr/bin:/bin"
    assert_sane(run_cli(args, env))


def _raw_server(payload: bytes, drip_s: float):
    def behaviour(conn, stop):
        step = max(1, len(payload) // 20) if drip_s else len(payload) or 1
        for i in range(0, len(payload), step):
            if stop.wait(drip_s):
                return
            conn.sendall(payload[i:i + step])
    return behaviour


HTTP_ANSWERS = st.one_of(
    st.binary(max_size=400),
    st.tuples(st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 503 x", b"HTTP/1.0 200", b"HTTP/9 200 OK", b"200"]),
              st.lists(st.sampled_from([b"Content-Length: 5", b"Content-Length: 99999999999999",
                                        b"Content-Length: -1", b"Transfer-Encoding: chunked", b"X: y", b"bad header",
                                        b"Content-Type: application/json"]), max_size=3),
              st.binary(max_size=200)).map(lambda t: t[0] + b"\r\n" + b"\r\n".join(t[1]) + b"\r\n\r\n" + t[2]),
)


@pytest.mark.slow
@FEW
@given(HTTP_ANSWERS, st.sampled_from([0.0, 0.1]), st.sampled_from(["healthcheck", "verify"]))
def test_misbehaving_servers(answer, drip_s, command):
    with Server(_raw_server(answer, drip_s), lifetime_s=20) as srv:
        if command == "healthcheck":
            result = run_cli(["healthcheck", "--timeout", "1"], base_env(KIMI_HARDWARE="h200", KIMI_PORT=str(srv.port)))
            assert result.code in (0, 1)
        else:
            result = run_cli(["verify", "--url", srv.url, "--expect-model", "m", "--features", "", "--timeout", "1"],
                             base_env())
    assert_sane(result)


@settings(FUZZ, max_examples=300)
@given(st.text(alphabet="ab0123456789[]-,", max_size=40))
def test_slurm_nodelists(text):
    from entrypoint.node.cluster import expand_nodelist

    try:
        hosts = expand_nodelist(text, limit=1000)
    except ValueError:
        return
    assert len(hosts) <= 1000


@pytest.mark.slow
@settings(FUZZ, max_examples=6)
@given(environments())
def test_subprocess_sample(tmp_path_factory, case):
    """A few generated environments through the real entrypoint (python -m entrypoint)."""
    env, secret = case
    full = base_env(**{"KIMI_CACHE_DIR": str(tmp_path_factory.getbasetemp()), **env, "KIMI_DRY_RUN": "1"})
    for args in (["print"], []):
        result = run_proc(args, full)
        result.assert_clean()
        assert REPORT_HINT not in result.text and secret not in result.text, result.text[-2000:]
