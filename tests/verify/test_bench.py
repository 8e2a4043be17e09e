"""`kimi-serve bench` without a real vLLM: the data (workloads, references), the figures read from a
real client's saved result (tests/data/vllm-0.32.0/bench-serve-result.json), the whole command
against the verify stand-in with a `vllm` stand-in (tests/verify/fake_vllm.py), and every bad
input as one line with its documented exit code. test_real_vllm.py runs it against a real server."""

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from bench_helpers import ROOT, bench_env, fake_vllm_dir, kimi_serve, recipes_with_tiny_workload
from pydantic import ValidationError

from entrypoint.core.base import limits
from entrypoint.core.base.errors import KimiError
from entrypoint.core.data.bench import (
    BenchFile, Deployment, bench_data, compare, figures, find_reference, load_bench, parse_sweep,
)
from entrypoint.core.data.bench_schema import published
from entrypoint.core.data.recipe import load_catalog
from entrypoint.verify.bench import Spec, client_argv
from entrypoint.verify.bench_report import Progress

RESULT = json.loads((ROOT / "tests" / "data" / "vllm-0.32.0" / "bench-serve-result.json").read_text())
H200 = Deployment("kimi-k2.5", "h200", "default", 8, 8)


# --- the data --------------------------------------------------------------------------------------


def test_the_published_figures_are_the_ones_the_issue_cites():
    data = bench_data()
    h200 = find_reference(data, H200, "8k1k")
    assert (h200.tensor_parallel, h200.engine) == (8, "vLLM 0.21")
    # InferenceX's headline is TOTAL tokens/s per GPU (issue 31): the published per-user decode rates give
    # output per GPU = per user x concurrency / 8 GPUs, about 1/9 of total at 8k in / 1k out
    assert [(p.concurrency, p.total_tokens_per_s_per_gpu, p.tokens_per_s_per_user) for p in h200.points] == [
        (4, 384, 91.2), (16, 798, 46.6), (64, 1175, 16.7)]
    assert all(p.output_tokens_per_s_per_gpu is None for p in h200.points)
    for p in h200.points:
        output_per_gpu = p.tokens_per_s_per_user * p.concurrency / 8
        assert 6 < p.total_tokens_per_s_per_gpu / output_per_gpu < 10  # (8k + 1k) / 1k = 9, with prefill and TTFT
    b200 = find_reference(data, Deployment("kimi-k2.5", "b200", "nvfp4", 4, 4), "8k1k")
    assert b200.tensor_parallel == 4
    assert [(p.concurrency, p.total_tokens_per_s_per_gpu) for p in b200.points] == [(None, 3879)]
    assert {name: (w.input_len, w.output_len) for name, w in data.workloads.items()} == {
        "1k1k": (1024, 1024), "1k8k": (1024, 8192), "8k1k": (8192, 1024)}


def test_a_reference_is_matched_by_hardware_and_variant():
    data = bench_data()
    assert find_reference(data, Deployment("kimi-k2.5", "b200", "default", 8, 8), "8k1k") is None
    assert find_reference(data, Deployment("kimi-k2.5", "h100", "default", 8, 8), "8k1k") is None
    assert find_reference(data, H200, "1k1k") is None
    assert find_reference(data, H200, None) is None


def test_every_reference_names_what_the_recipe_data_has():
    catalog = load_catalog()
    for ref in bench_data().references:
        assert ref.hardware in catalog.hardware and ref.variant in catalog.recipes[ref.recipe].variants
        assert (ROOT / "recipes" / "models" / f"{ref.recipe}.yaml").is_file()


def _edited(tmp_path: Path, edit) -> Path:
    directory = recipes_with_tiny_workload(tmp_path)
    data = yaml.safe_load((directory / "bench" / "benchmarks.yaml").read_text())
    edit(data)
    (directory / "bench" / "benchmarks.yaml").write_text(yaml.safe_dump(data))
    return directory


@pytest.mark.parametrize("edit, complaint", [
    (lambda d: d["references"][0].update(hardware="h201"), "unknown hardware 'h201'"),
    (lambda d: d["references"][0].update(variant="fp2"), "unknown variant 'fp2'"),
    (lambda d: d["references"][0].update(recipe="kimi-k9"), "unknown recipe 'kimi-k9'"),
    (lambda d: d["references"][0].update(workload="2k2k"), "workloads named but not defined: 2k2k"),
    (lambda d: d["references"][0].update(colour="red"), "colour"),
    (lambda d: d["references"][0]["points"].append({"concurrency": 4, "output_tokens_per_s_per_gpu": 1}),
     "a concurrency repeats"),
    (lambda d: d["defaults"].update(concurrency=[1, 1]), "a level repeats"),
    (lambda d: d["references"][0].update(date="December 2026"), "date"),
])
def test_broken_bench_data_is_refused(tmp_path, edit, complaint):
    from entrypoint.core.data.bench import BenchDataError

    directory = _edited(tmp_path, edit)
    with pytest.raises((BenchDataError, ValidationError, KimiError)) as caught:
        load_bench(directory, load_catalog(directory))
    assert complaint in str(caught.value)


def test_the_schema_refuses_unknown_keys_at_the_top():
    with pytest.raises(ValidationError):
        BenchFile(workloads={"a": {"input_len": 1, "output_len": 1, "description": ""}},
                  defaults={"workload": "a", "concurrency": [1], "prompts_per_concurrency": 1, "min_prompts": 1},
                  extra=1)


# --- the sweep and the figures ---------------------------------------------------------------------


def test_a_sweep_is_a_comma_list_of_distinct_levels():
    assert parse_sweep("1,4,16,64") == (1, 4, 16, 64)
    assert parse_sweep(" 2 , 8 ") == (2, 8)
    for bad in ("", "1,,4", "0", "4,4", "1.5", "-1", "x", "99999999999", str(limits.MAX_BENCH_CONCURRENCY + 1),
                ",".join(str(i) for i in range(1, limits.MAX_BENCH_LEVELS + 2))):
        with pytest.raises(KimiError) as caught:
            parse_sweep(bad)
        assert caught.value.exit_code == 2 and "--concurrency" in caught.value.message


def test_figures_from_the_clients_saved_result():
    got = figures(RESULT, 2, 8)
    assert got["completed"] == RESULT["completed"] == 6 and got["failed"] == 0
    assert got["output_tokens"] == 48  # 6 answers of exactly 8 tokens (--ignore-eos)
    assert got["output_tokens_per_s"] == round(RESULT["output_throughput"], 3)
    assert got["output_tokens_per_s_per_gpu"] == round(RESULT["output_throughput"] / 8, 3)
    assert got["output_tokens_per_s"] == pytest.approx(got["output_tokens"] / got["duration_s"], rel=1e-3)
    # InferenceX's three per-GPU rates: total (its headline tput_per_gpu) = input + output, from the client's
    # own token counts
    duration = RESULT["duration"]
    assert got["total_tokens_per_s_per_gpu"] == pytest.approx(
        (RESULT["total_input_tokens"] + RESULT["total_output_tokens"]) / duration / 8, rel=1e-3)
    assert got["input_tokens_per_s_per_gpu"] == pytest.approx(RESULT["total_input_tokens"] / duration / 8, rel=1e-3)
    assert got["total_tokens_per_s_per_gpu"] == pytest.approx(
        got["input_tokens_per_s_per_gpu"] + got["output_tokens_per_s_per_gpu"], abs=0.002)
    assert got["ttft_ms"] == {"p50": round(RESULT["p50_ttft_ms"], 3), "p99": round(RESULT["p99_ttft_ms"], 3)}
    assert got["tokens_per_s_per_user"] == round(1000 / round(RESULT["p50_tpot_ms"], 3), 3)
    assert set(got["itl_ms"]) == {"p50", "p99"}


@pytest.mark.parametrize("key, value", [("output_throughput", None), ("p99_itl_ms", "fast"), ("completed", -1),
                                        ("duration", float("nan"))])
def test_a_result_without_a_figure_is_refused(key, value):
    from entrypoint.core.data.bench import ResultError

    with pytest.raises(ResultError, match=key):
        figures({**RESULT, key: value}, 2, 8)


def test_the_comparison_is_measured_over_published():
    ref = find_reference(bench_data(), H200, "8k1k")
    # like with like: each published metric against the measured figure of the same metric, never output vs total
    results = [{"concurrency": 4, "total_tokens_per_s_per_gpu": 192.0, "output_tokens_per_s_per_gpu": 21.0,
                "tokens_per_s_per_user": 45.6},
               {"concurrency": 16, "total_tokens_per_s_per_gpu": 798.0, "output_tokens_per_s_per_gpu": 88.0,
                "tokens_per_s_per_user": 46.6}]
    T, U = "total_tokens_per_s_per_gpu", "tokens_per_s_per_user"
    assert compare(ref, results) == [
        {"concurrency": 4, "metric": T, "published": 384, "measured": 192.0, "ratio": 0.5},
        {"concurrency": 4, "metric": U, "published": 91.2, "measured": 45.6, "ratio": 0.5},
        {"concurrency": 16, "metric": T, "published": 798, "measured": 798.0, "ratio": 1.0},
        {"concurrency": 16, "metric": U, "published": 46.6, "measured": 46.6, "ratio": 1.0},
        {"concurrency": 64, "metric": T, "published": 1175, "measured": None, "ratio": None},
        {"concurrency": 64, "metric": U, "published": 16.7, "measured": None, "ratio": None}]
    peak = find_reference(bench_data(), Deployment("kimi-k2.5", "b200", "nvfp4", 4, 4), "8k1k")
    assert compare(peak, results)[0]["measured"] == 798.0  # "high concurrency": the sweep's best


def test_a_point_records_at_least_one_metric():
    from entrypoint.core.data.bench import Point

    with pytest.raises(ValueError, match="records none of"):
        Point(concurrency=4)


def test_the_client_is_given_an_argv_with_fixed_lengths(tmp_path):
    spec = Spec(url="http://127.0.0.1:8000", model="kimi-k2.5", tokenizer="moonshotai/Kimi-K2.5", input_len=8192,
                output_len=1024, concurrency=(4,), prompts=(40,), output=tmp_path, gpus=8, trust_remote_code=True)
    argv = client_argv("/opt/vllm", spec, 4, 40, "c4.json")
    assert argv[:3] == ["/opt/vllm", "bench", "serve"]
    pairs = dict(zip(argv[3::1], argv[4::1]))
    assert pairs["--random-input-len"] == "8192" and pairs["--random-output-len"] == "1024"
    assert pairs["--random-range-ratio"] == "0" and pairs["--max-concurrency"] == "4" and pairs["--num-prompts"] == "40"
    assert "--ignore-eos" in argv and argv[-1] == "--trust-remote-code"


def test_progress_in_a_log_is_one_line_per_level():
    class Log(list):
        def write(self, text):
            self.append(text)

        def flush(self):
            pass

    log = Log()
    bar = Progress((1, 4), log)
    for call in [(0, 2, 0, 8), (0, 2, 4, 8), (1, 2, 8, 8), (1, 2, 0, 40), (1, 2, 40, 40), (2, 2, 40, 40)]:
        bar(*call)
    assert log == ["bench: concurrency 1 done (1/2)\n", "bench: concurrency 4 done (2/2)\n"]


def test_progress_on_a_terminal_is_one_bar_redrawn():
    class Terminal(list):
        def write(self, text):
            self.append(text)

        def flush(self):
            pass

        def isatty(self):
            return True

    screen = Terminal()
    bar = Progress((1, 4), screen)
    bar(0, 2, 0, 8)
    bar(1, 2, 20, 40)
    bar.end()
    assert screen[0] == "\rbench [" + "-" * 30 + "]   0%  concurrency 1 (1/2): 0/8 requests "
    assert screen[1] == "\rbench [" + "#" * 22 + "-" * 8 + "]  75%  concurrency 4 (2/2): 20/40 requests "
    assert screen[2] == "\n"


# --- the command, with a `vllm` stand-in -----------------------------------------------------------


@pytest.fixture
def fake(tmp_path):
    return fake_vllm_dir(tmp_path)


def run_bench(url: str, *args: str, env: dict, timeout: float = 300):
    done = kimi_serve("bench", "--url", url, "--tokenizer", "tok", *args, env=env, timeout=timeout)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.slow
def test_a_sweep_writes_figures_reference_charts_and_summary(standin, fake, tmp_path):
    server = standin("ok")
    argv_log = tmp_path / "argv.jsonl"
    env = bench_env([fake], KIMI_RECIPES_DIR=str(recipes_with_tiny_workload(tmp_path)), FAKE_VLLM_ARGV=str(argv_log),
                    KIMI_CACHE_DIR=str(tmp_path / "cache"))
    out = tmp_path / "out"
    done = run_bench(server.url, "--workload", "tiny", "--concurrency", "1,2", "--num-prompts", "6", "--output",
                     str(out), "--format", "json", env=env)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert list(run)[:3] == ["results", "reference", "files"]
    assert [r["concurrency"] for r in run["results"]] == [1, 2]
    assert all(r["output_tokens_per_s_per_gpu"] == round(RESULT["output_throughput"] / 8, 3) for r in run["results"])
    assert run["deployment"] == {"recipe": "kimi-k2.5", "hardware": "h200", "variant": "default", "gpus": 8,
                                 "tensor_parallel": 8}
    ref = run["reference"]
    assert ref["hardware"] == "h200" and ref["workload"] == "tiny" and ref["same_tensor_parallel"]
    measured = run["results"][0]["output_tokens_per_s_per_gpu"]
    assert [p["ratio"] for p in ref["points"]] == [round(measured / 10, 3), round(measured / 20, 3),
                                                   round(measured / 40, 3)]
    names = sorted(Path(f).name for f in run["files"])
    assert names == ["latency.png", "latency.svg", "results.json", "summary.md", "throughput.png", "throughput.svg",
                     "vllm-bench-c1.json", "vllm-bench-c2.json"]
    assert (out / "throughput.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert b"<svg" in (out / "latency.svg").read_bytes()[:2000]
    summary = (out / "summary.md").read_text()
    assert "| 2 | 6/6 |" in summary and "tests/verify/bench_helpers.py (made up)" in summary
    calls = [json.loads(line) for line in argv_log.read_text().splitlines()]
    benches = [c["argv"] for c in calls if c["argv"][:2] == ["bench", "serve"]]
    assert {c["HF_HOME"] for c in calls if c["argv"][:2] == ["bench", "serve"]} == {
        str(tmp_path / "cache" / "huggingface")}  # the tokenizer comes from the launch's cache
    assert [c[c.index("--max-concurrency") + 1] for c in benches] == ["1", "2"]
    assert all(c[c.index("--base-url") + 1] == server.url and c[c.index("--model") + 1] == "kimi-k2.5"
               for c in benches)


@pytest.mark.slow
def test_links_planted_under_the_output_are_replaced_never_followed(standin, fake, tmp_path):
    """Every file bench writes (results.json, summary.md, the charts) goes through the one writer."""
    server = standin("ok")
    env = bench_env([fake], KIMI_RECIPES_DIR=str(recipes_with_tiny_workload(tmp_path)),
                    KIMI_CACHE_DIR=str(tmp_path / "cache"))
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    names = ["results.json", "summary.md", "throughput.png", "throughput.svg", "latency.png", "latency.svg"]
    for name in names:
        (victim / name).write_text("precious")
        (out / name).symlink_to(victim / name)
    done = run_bench(server.url, "--workload", "tiny", "--concurrency", "1", "--num-prompts", "2", "--output",
                     str(out), "--format", "json", env=env)
    assert done.returncode == 0, done.stderr
    assert all((victim / name).read_text() == "precious" for name in names)
    written = [name for name in names if (out / name).exists()]
    assert "results.json" in written and "summary.md" in written
    assert not any((out / name).is_symlink() for name in written)
    assert json.loads((out / "results.json").read_text())["results"][0]["concurrency"] == 1


def test_text_mode_shows_progress_and_says_when_there_is_no_reference(standin, fake, tmp_path):
    env = bench_env([fake], hardware="b200", KIMI_RECIPES_DIR=str(recipes_with_tiny_workload(tmp_path)))
    done = run_bench(standin("ok").url, "--workload", "tiny", "--concurrency", "1", "--num-prompts", "2",
                     "--no-charts", "--output", str(tmp_path / "out"), env=env)
    assert done.returncode == 0, done.stderr
    assert "bench: concurrency 1 done (1/1)" in done.stderr
    assert ("no published reference for kimi-k2.5 on b200, variant default, workload tiny; published for "
            "kimi-k2.5: b200/nvfp4/8k1k, h200/default/8k1k, h200/default/tiny") in done.stdout
    assert "png" not in done.stdout


def test_failed_requests_give_exit_1_with_the_figures(standin, fake, tmp_path):
    env = bench_env([fake], FAKE_VLLM_MODE="failed_requests")
    done = run_bench(standin("ok").url, "--input-len", "32", "--output-len", "8", "--concurrency", "2",
                     "--num-prompts", "6", "--no-charts", "--output", str(tmp_path), "--format", "json", env=env)
    assert done.returncode == 1
    assert json.loads(done.stdout)["results"][0]["failed"] == 2
    assert "kimi-serve: warning: concurrency 2: 2 of 6 requests failed" in done.stderr


def test_a_client_that_fails_ends_the_sweep_with_its_words(standin, fake, tmp_path):
    env = bench_env([fake], FAKE_VLLM_MODE="fail")
    done = run_bench(standin("ok").url, "--input-len", "32", "--output-len", "8", "--concurrency", "1,2",
                     "--output", str(tmp_path), "--format", "json", env=env)
    assert done.returncode == 1
    run = json.loads(done.stdout)
    assert run["results"] == []
    assert run["problems"] == ["concurrency 1: `vllm bench serve` exited with 1; its last words: ValueError: Initial "
                               "test run failed - Please make sure benchmark arguments are correctly specified. "
                               "Error: Cannot connect to host"]


def test_a_secret_in_the_clients_words_is_masked(standin, fake, tmp_path):
    secret = "hf_bench_secret_0123456789"
    env = bench_env([fake], FAKE_VLLM_MODE="fail", FAKE_VLLM_SAY=f" token={secret}", HF_TOKEN=secret)
    for fmt in ("text", "json"):
        done = run_bench(standin("ok").url, "--input-len", "32", "--output-len", "8", "--concurrency", "1",
                         "--output", str(tmp_path), "--format", fmt, env=env)
        assert done.returncode == 1 and "Cannot connect to host token=***" in done.stdout + done.stderr
        assert secret not in done.stdout + done.stderr
        assert not [f for f in tmp_path.iterdir() if f.is_file() and secret in f.read_text()]


@pytest.mark.slow
def test_a_sweep_is_bounded_in_time_and_leaves_no_client(standin, fake, tmp_path):
    pidfile = tmp_path / "pid"
    env = bench_env([fake], FAKE_VLLM_MODE="hang", FAKE_VLLM_PIDFILE=str(pidfile))
    start = time.monotonic()
    done = run_bench(standin("ok").url, "--input-len", "32", "--output-len", "8", "--concurrency", "1",
                     "--output", str(tmp_path), "--timeout", "3", env=env, timeout=120)
    assert time.monotonic() - start < 100  # a bound, not a speed target: without one it sleeps 600 s
    assert done.returncode == 1
    assert "problem: concurrency 1: the sweep ran past --timeout 3 s" in done.stdout
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)


@pytest.mark.parametrize("args, exit_code, message", [
    (["--concurrency", "1,,4"], 2, "--concurrency '1,,4' is not a comma list of whole numbers"),
    (["--concurrency", "4,4"], 2, "--concurrency: a level repeats"),
    (["--workload", "8k2k"], 2, "--workload='8k2k' is not known. Valid values: 1k1k, 1k8k, 8k1k. Did you mean '8k1k'?"),
    (["--input-len", "32"], 2, "--input-len and --output-len go together"),
    (["--workload", "1k1k", "--input-len", "3", "--output-len", "3"], 2, "not both"),
    (["--num-prompts", "2", "--concurrency", "4"], 2, "--num-prompts 2 is below concurrency 4"),
    (["--timeout", "0"], 2, "--timeout"),
    (["--input-len", "0", "--output-len", "1"], 2, "--input-len"),
])
def test_bad_input_is_one_line_and_exit_2(standin, fake, args, exit_code, message):
    done = run_bench(standin("ok").url, *args, env=bench_env([fake]))
    assert done.returncode == exit_code and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("kimi-serve: error: ")
    assert message in done.stderr, done.stderr


def test_an_unreachable_server_is_exit_2(closed_port_url, fake):
    done = run_bench(closed_port_url, env=bench_env([fake]))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"kimi-serve: error: the server at {closed_port_url} does not answer" in done.stderr


def test_without_vllm_on_path_it_is_exit_127(standin):
    done = run_bench(standin("ok").url, env=bench_env())
    assert done.returncode == 127 and done.stderr.count("\n") == 1
    assert "`vllm` is not on PATH" in done.stderr


def test_an_unwritable_output_is_exit_2(standin, fake, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = run_bench(standin("ok").url, "--input-len", "3", "--output-len", "3", "--concurrency", "1",
                     "--output", str(blocker / "out"), env=bench_env([fake]))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and str(blocker) in done.stderr


def test_the_docs_list_every_option_of_the_command():
    import re

    from entrypoint.cli.bench import command

    text = (ROOT / "docs" / "bench.md").read_text()
    first_cells = re.findall(r"^\| (`--[^|]+)\|", text, flags=re.M)
    documented = {flag for cell in first_cells for flag in re.findall(r"`(--[a-z-]+)`", cell)}
    options = {opt for param in command.params for opt in param.opts if opt.startswith("--")} - {"--help"}
    assert documented == options


def test_the_docs_tables_say_what_the_data_says():
    import re

    text = (ROOT / "docs" / "bench.md").read_text()
    data = bench_data()
    rows = re.findall(r"^\| `([0-9a-z]+)` \| (\d+) / (\d+) \|", text, flags=re.M)
    assert {name: (int(i), int(o)) for name, i, o in rows} == {
        name: (w.input_len, w.output_len) for name, w in data.workloads.items()}
    references = text.split("## References", 1)[1].split("\n## ", 1)[0]
    for ref in data.references:
        row = next(line for line in references.splitlines()
                   if line.startswith(f"| {ref.recipe} | {ref.hardware}") and f"| {ref.variant}" in line)
        assert f"| {ref.tensor_parallel} | {ref.engine} | {ref.workload} |" in row
        for point in ref.points:
            for metric, value in published(point).items():
                assert f"{value:,.0f}" in row or f"{value:,.1f}" in row, (metric, value, row)
    assert f"| `--workload` | `{data.defaults.workload}` |" in text
    assert f"| `--concurrency` | `{','.join(map(str, data.defaults.concurrency))}` |" in text
    assert (f"| `--num-prompts` | {data.defaults.prompts_per_concurrency} x the concurrency, at least "
            f"{data.defaults.min_prompts} |") in text


def test_any_sweep_text_is_a_sweep_or_a_usage_error():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(st.text(max_size=60), st.lists(st.integers(-5, 5000), max_size=20).map(
        lambda xs: ",".join(map(str, xs)))))
    def check(text):
        try:
            levels = parse_sweep(text)
        except KimiError as error:
            assert error.exit_code == 2 and error.message.startswith("--concurrency")
            return
        assert 1 <= len(levels) <= limits.MAX_BENCH_LEVELS and len(set(levels)) == len(levels)
        assert all(1 <= c <= limits.MAX_BENCH_CONCURRENCY for c in levels)

    check()


@pytest.mark.parametrize("environ, expected", [
    ({"KIMI_HARDWARE": "h200"}, Deployment("kimi-k2.5", "h200", "default", 8, 8)),
    ({"KIMI_HARDWARE": "b200", "KIMI_VARIANT": "nvfp4"}, Deployment("kimi-k2.5", "b200", "nvfp4", 8, 8)),
    ({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": "p0", "KIMI_DECODE_ADDRS": "d0"},
     Deployment("kimi-k2.5", "h200", "default", 16, 1)),  # both pools' GPUs; DEP pools: TP 1 x DP 8
])
def test_the_deployment_is_read_from_the_launch_plan(environ, expected, tmp_path):
    from entrypoint.app.bench import bench_target

    target = bench_target({**environ, "KIMI_CACHE_DIR": str(tmp_path)})
    assert target.deployment == expected
    assert target.url == "http://127.0.0.1:8000" and target.trust_remote_code
    assert target.cache_env["HF_HOME"] == f"{tmp_path}/huggingface"
    reference = find_reference(bench_data(), target.deployment, "8k1k")
    if expected.variant == "nvfp4":  # published for TP4, launched as TP8: shown, with the difference
        from entrypoint.core.data.bench import reference_json

        assert reference_json(reference, [], target.deployment)["same_tensor_parallel"] is False


@pytest.mark.slow
def test_a_one_gpu_recipe_without_references(standin, fake, tmp_path):
    """Kimi-Linear on h200 runs on one GPU (TP 1): the per-GPU figure is the whole throughput, and a
    recipe with no published figure says so without an empty list."""
    env = bench_env([fake], KIMI_RECIPE="kimi-linear-48b-a3b-instruct",
                    KIMI_RECIPES_DIR=str(recipes_with_tiny_workload(tmp_path)))
    done = run_bench(standin("plain").url, "--workload", "tiny", "--concurrency", "1", "--num-prompts", "2",
                     "--no-charts", "--output", str(tmp_path / "out"), "--format", "json", env=env)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["deployment"] == {"recipe": "kimi-linear-48b-a3b-instruct", "hardware": "h200", "variant": "default",
                                 "gpus": 1, "tensor_parallel": 1}
    assert run["results"][0]["output_tokens_per_s_per_gpu"] == round(RESULT["output_throughput"], 3)
    assert run["reference"] is None
    assert run["reference_note"] == ("no published reference for kimi-linear-48b-a3b-instruct on h200, variant "
                                     "default, workload tiny")


_K25 = "moonshotai/Kimi-K2.5"
_BENCH_SHAPES = {  # shape -> (its settings, engine, (GPUs, TP) as the recipe data lays it out, model)
    "single": ({"KIMI_HARDWARE": "h200"}, "single rank 0", (8, 8), _K25),
    "single-dep": ({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "single_node_dep"}, "single rank 0", (8, 1), _K25),
    # the InferenceX lane's profile sets TP 4 on a node of 8
    "single-tp4": ({"KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4", "KIMI_PROFILE": "inferencex",
                    "KIMI_EXTRA_ARGS": "--max-model-len 9472"}, "single rank 0", (4, 4), "amd/Kimi-K2.5-MXFP4"),
    "multi-node": ({"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2",
                    "KIMI_HEAD_ADDR": "10.0.0.1"}, "head rank 0", (16, 16), _K25),
    # TP 8 x PP 2: 16 GPUs, TP 8
    "multi-node-pp": ({"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp_pp", "KIMI_NODES": "2",
                       "KIMI_HEAD_ADDR": "10.0.0.1"}, "head rank 0", (16, 8), _K25),
    "pd": ({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": "p0", "KIMI_DECODE_ADDRS": "d0",
            "KIMI_PREFILL_PARALLELISM": "tp", "KIMI_DECODE_PARALLELISM": "tp"}, "prefill rank 0", (16, 8), _K25),
    "pd-dep": ({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": "p0",
                "KIMI_DECODE_ADDRS": "d0", "KIMI_PREFILL_PARALLELISM": "dep", "KIMI_DECODE_PARALLELISM": "tp"},
               "prefill rank 0", (16, 1), _K25),
    # two instances of 8 GPUs behind the router: 16, not the master's 0 nor one instance's 8
    "kv-store": ({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake",
                  "KIMI_INSTANCE_ADDRS": "i1,i2", "KIMI_MOONCAKE_MASTER_ADDR": "m", "KIMI_MOONCAKE_STORE_HOST": "s"},
                 "instance rank 0", (16, 8), _K25),
}
_TP_SPELLINGS = ("-tp 4", "--tensor-parallel-size=4", "--tensor-parallel-size 4", "--tensor_parallel_size 4",
                 "--tensor-parallel 4")  # the last: an abbreviation vLLM's parser accepts


@pytest.mark.parametrize("shape", sorted(_BENCH_SHAPES))
def test_bench_records_the_engine_its_tp_and_the_deployments_gpus(shape, tmp_path):
    """Every plan shape: the facts come from the engines (never the router nor a KV master), TP as
    vLLM reads it from the engine's arguments, every engine's GPUs."""
    from entrypoint.app.bench import bench_target

    environ, engine, (gpus, tp), model = _BENCH_SHAPES[shape]
    environ = {**environ, "KIMI_CACHE_DIR": str(tmp_path), "KIMI_SKIP_MEMORY_CHECK": "1"}
    target = bench_target(environ)
    assert (target.deployment.gpus, target.deployment.tensor_parallel) == (gpus, tp)
    assert target.engine == engine and target.trust_remote_code  # the recipe's --trust-remote-code
    assert target.model == model


@pytest.mark.parametrize("spelling", _TP_SPELLINGS)
def test_bench_reads_tp_in_every_spelling_and_refuses_the_users(spelling, tmp_path):
    """TP as vLLM's grammar reads it, in every spelling it accepts; in the user's arguments it is
    refused (issue 37: the layout is KIMI_STRATEGY's), so bench records no TP the pod lacks."""
    import shlex

    from entrypoint.app.bench import bench_target
    from entrypoint.core.base.errors import KimiError
    from entrypoint.core.vllm.vllm_cli import engine_args, load_spec, newest_version

    found = engine_args(["--tensor-parallel-size", "8", *shlex.split(spelling)], load_spec(newest_version()))
    assert (found.tensor_parallel, found.gpus_needed) == (4, 4)
    with pytest.raises(KimiError) as err:
        bench_target({"KIMI_HARDWARE": "h200", "KIMI_CACHE_DIR": str(tmp_path), "KIMI_SKIP_MEMORY_CHECK": "1",
                      "KIMI_EXTRA_ARGS": spelling})
    assert "KIMI_STRATEGY" in err.value.message
