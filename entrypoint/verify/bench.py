"""`kimi-serve bench`: drive vLLM's own benchmark client (`vllm bench serve`) over a sweep of
concurrencies against a running server and read the result files it saves.

The client runs as an argv list (never a shell) in its own process group, one run per
concurrency, under one deadline for the whole sweep; its output is read with a select loop so the
deadline holds while it prints nothing, and only its last lines are kept (to explain a failure).
Its result JSON is read with a size cap. Figures and the reference come from entrypoint.core.data.bench.
"""

from __future__ import annotations

import functools
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from entrypoint.core.base import limits
from entrypoint.core.base.bounded import HttpError, request
from entrypoint.core.base.errors import INVALID_VALUE, KimiError
from entrypoint.core.base.files import read_capped, write_file
from entrypoint.core.data.bench import figures, find_reference, no_reference_reason, reference_json, ResultError
from entrypoint.core.vllm.mask import mask_flags, mask_output, mask_text, secret_values
from entrypoint.verify import bench_report

EXIT_FOUND_PROBLEMS = 1  # the sweep ran: some requests failed, the client failed, or time ran out
EXIT_NO_PROGRAM = 127  # as a shell: the client program is not on PATH
SERVER_CHECK_S = 10.0  # /v1/models must answer within this before the sweep starts
_TQDM = re.compile(rb"(\d+)/(\d+) \[")  # the client's tqdm bar: " 33%|###  | 2/6 [00:01<00:02, ...]"
STOP_WITHIN_S = 10.0


@dataclass(frozen=True)
class Spec:
    """One sweep: everything `vllm bench serve` is given, per concurrency."""

    url: str
    model: str  # the served name sent in each request
    tokenizer: str  # a local directory or a hub id (resolved from the cache)
    input_len: int
    output_len: int
    concurrency: tuple
    prompts: tuple  # --num-prompts per level
    output: Path
    gpus: int
    trust_remote_code: bool = False
    seed: int = 0
    extra_env: dict = field(default_factory=dict)


def client_program() -> str:
    found = shutil.which("vllm")
    if not found:
        raise KimiError("missing_program", "`vllm` is not on PATH: bench drives vLLM's own benchmark client "
                        "(`vllm bench serve`), which every kimi-serve image has; outside one, install vllm or put "
                        "its bin directory on PATH", EXIT_NO_PROGRAM)
    return found


def client_argv(program: str, spec: Spec, level: int, prompts: int, result_name: str) -> List[str]:
    """vllm bench serve's own flags (vLLM 0.32): the completions endpoint, fixed-length random
    prompts (range ratio 0) whose answers run to exactly output_len (end of sequence ignored)."""
    argv = [program, "bench", "serve", "--backend", "vllm", "--endpoint", "/v1/completions",
            "--base-url", spec.url, "--model", spec.model, "--tokenizer", spec.tokenizer,
            "--dataset-name", "random", "--random-input-len", str(spec.input_len),
            "--random-output-len", str(spec.output_len), "--random-range-ratio", "0",
            "--ignore-eos", "--num-prompts", str(prompts), "--max-concurrency", str(level),
            "--request-rate", "inf", "--seed", str(spec.seed),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--save-result", "--result-dir", str(spec.output), "--result-filename", result_name]
    return argv + (["--trust-remote-code"] if spec.trust_remote_code else [])


def check_server(url: str, model: Optional[str]) -> str:
    """The model name to send: --model, else the one /v1/models lists. An unreachable server is
    a usage error here, before the client's own minutes of start-up."""
    try:
        answer = request("GET", url + "/v1/models", timeout=SERVER_CHECK_S, max_bytes=limits.MAX_HTTP_BODY_BYTES)
    except HttpError as error:
        raise KimiError(INVALID_VALUE, f"the server at {url} does not answer ({error}): start it, wait until "
                        "`kimi-serve healthcheck` says healthy, or give --url") from None
    try:
        ids = [m["id"] for m in answer.json()["data"]] if answer.status_code == 200 else None
    except (ValueError, KeyError, TypeError):
        ids = None
    if ids is None:
        raise KimiError(INVALID_VALUE, f"{url}/v1/models answered HTTP {answer.status_code} without a model list: "
                        "is this a vLLM server? (--url is the server root, e.g. http://127.0.0.1:8000)")
    if not ids:  # never an empty list of choices: say what is missing
        raise KimiError(INVALID_VALUE, f"{url}/v1/models lists no model: the server is up but serves nothing yet "
                        "(is the model still loading? `kimi-serve healthcheck` says when it is ready)")
    if model:
        if model not in ids:
            raise KimiError(INVALID_VALUE, f"--model {model!r} is not served at {url} (it serves {', '.join(ids)})")
        return model
    if len(ids) != 1:
        raise KimiError(INVALID_VALUE, f"{url} serves {len(ids)} models ({', '.join(ids)}): pick one with --model")
    return ids[0]


class ClientFailed(Exception):
    def __init__(self, message: str, tail: List[str]):
        super().__init__(message)
        self.tail = tail


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_WITHIN_S)


def run_client(argv: List[str], deadline: float, progress: Callable[[int, int], None],
               env: Optional[dict] = None) -> List[str]:
    """Run the client to its end before `deadline` (monotonic); its last lines. ClientFailed when it
    exits non-zero or runs out of time (it is stopped, its whole process group)."""
    tail: deque = deque(maxlen=limits.MAX_BENCH_LOG_LINES)
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env={**os.environ, **(env or {})}, start_new_session=True)
    pending = b""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClientFailed("ran out of time", list(tail))
                if not selector.select(min(left, 1.0)):
                    continue
                data = os.read(process.stdout.fileno(), 65536)
                if not data:
                    break
                pending += data
                *lines, pending = re.split(rb"[\r\n]", pending)
                pending = pending[-4096:]  # a line without an end is cut, not grown
                for line in lines:
                    for done, total in _TQDM.findall(line)[-1:]:
                        progress(int(done), int(total))
                    text = line.decode("utf-8", "replace").strip()
                    if text and not _TQDM.search(line):
                        tail.append(text[:500])
        process.stdout.close()
        process.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise ClientFailed("ran out of time", list(tail)) from None
    finally:
        _stop(process)
    if process.returncode != 0:
        raise ClientFailed(f"exited with {process.returncode}", list(tail))
    return list(tail)


def read_result(path: Path) -> dict:
    """The client's saved result: a regular file (a FIFO put there is refused, not waited on) of
    at most MAX_BENCH_RESULT_BYTES, JSON (nesting bounded)."""
    try:
        data = read_capped(path, limits.MAX_BENCH_RESULT_BYTES)
    except FileNotFoundError:
        raise ResultError(f"the client saved no result at {path}") from None
    except OSError as error:
        raise ResultError(f"the result {path} cannot be read ({error.strerror or error})") from None
    if len(data) > limits.MAX_BENCH_RESULT_BYTES:
        raise ResultError(f"{path} is more than the {limits.MAX_BENCH_RESULT_BYTES} bytes a result may be")
    try:
        return json.loads(data)
    except RecursionError:
        raise ResultError(f"{path} nests too deep to be a result") from None
    except ValueError as error:
        raise ResultError(f"{path} is not JSON ({error})") from None


@dataclass
class Sweep:
    results: List[dict] = field(default_factory=list)
    files: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)  # why the exit code is 1


def run_sweep(spec: Spec, timeout: float, progress: Callable[[int, int, int, int], None]) -> Sweep:
    """One client run per concurrency, in order; progress(level_index, levels, done, total).
    A failed run ends the sweep (later levels would fail the same way) and is a problem."""
    program = client_program()
    spec.output.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    sweep = Sweep()
    for index, (level, prompts) in enumerate(zip(spec.concurrency, spec.prompts)):
        name = f"vllm-bench-c{level}.json"
        (spec.output / name).unlink(missing_ok=True)  # never read a result of an earlier run
        progress(index, len(spec.concurrency), 0, prompts)
        try:
            run_client(client_argv(program, spec, level, prompts, name), deadline,
                       functools.partial(progress, index, len(spec.concurrency)), spec.extra_env)
            result = figures(read_result(spec.output / name), level, spec.gpus)
        except ClientFailed as failure:
            last = next((line for line in reversed(failure.tail) if "Error" in line or "error" in line),
                        failure.tail[-1] if failure.tail else "no output")
            why = (f"the sweep ran past --timeout {timeout:g} s" if str(failure) == "ran out of time"
                   else f"`vllm bench serve` {failure}")
            last = mask_flags(mask_text(last[:300], secret_values(os.environ)))  # also in the files written
            sweep.problems.append(f"concurrency {level}: {why}; its last words: {last}")
            break
        except ResultError as error:
            sweep.problems.append(f"concurrency {level}: {error}")
            break
        sweep.files.append(str(spec.output / name))
        sweep.results.append(result)
        if result["failed"]:
            sweep.problems.append(f"concurrency {level}: {result['failed']} of {prompts} requests failed")
        progress(index + 1, len(spec.concurrency), prompts, prompts)
    return sweep


def client_version(program: str, seconds: float = 30.0) -> str:
    """The client's vLLM version, for the record: asked of the Python that runs `vllm` (its
    script's #! line) through package metadata, not `vllm --version` (which imports vLLM: ~10 s).
    'version unknown' when that cannot say within `seconds`."""
    unknown = "vLLM, version unknown"
    try:
        with open(program, "rb") as fh:
            first = fh.read(512).split(b"\n", 1)[0]
    except OSError:
        return unknown
    words = first[2:].decode("utf-8", "replace").split() if first.startswith(b"#!") else []
    if len(words) != 1 or not os.path.isabs(words[0]) or not os.path.basename(words[0]).startswith("python"):
        return unknown  # only a plain Python interpreter is asked
    try:
        done = subprocess.run([*words, "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                              capture_output=True, text=True, timeout=max(1.0, seconds), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return unknown
    version = done.stdout.strip()
    return f"vLLM {version[:40]}" if done.returncode == 0 and version else unknown


def run_bench(spec: Spec, *, workload_name: Optional[str], deployment, data, timeout: float,
              progress: Callable[[int, int, int, int], None], charts: bool = True) -> dict:
    """The sweep, the reference comparison and the files (results.json, summary.md, the charts):
    the run as the JSON `bench --format json` prints."""
    program = client_program()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sweep = run_sweep(spec, timeout, progress)
    reference = find_reference(data, deployment, workload_name)
    run: Dict[str, Any] = {
        "url": spec.url, "model": spec.model, "date": started, "client": client_version(program),
        "workload": {"name": workload_name, "input_len": spec.input_len, "output_len": spec.output_len},
        "deployment": asdict(deployment),
        "results": sweep.results,
        "reference": reference_json(reference, sweep.results, deployment) if reference else None,
        "reference_note": None if reference else no_reference_reason(data, deployment, workload_name),
        "problems": sweep.problems,  # any: exit 1
        "notes": [],
        "files": list(sweep.files),
    }
    if charts:
        try:
            run["files"] += bench_report.write_charts(run, spec.output)
        except ImportError:
            run["notes"].append("no charts: matplotlib is not installed (pip install 'kimi-serve[bench]')")
    summary = spec.output / bench_report.SUMMARY
    run["files"] += [str(summary), str(spec.output / bench_report.RESULTS)]
    # the one writer (a link planted there is replaced) and the one mask (the client's words could carry a secret)
    write_file(summary, mask_output(bench_report.to_markdown(run), os.environ))
    write_file(spec.output / bench_report.RESULTS, mask_output(json.dumps(run, indent=2) + "\n", os.environ))
    return run
