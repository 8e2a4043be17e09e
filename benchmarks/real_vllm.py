#!/usr/bin/env python3
"""What the real-vLLM verify tests cost (run by hand; not a test): what CI pays for them.

    python benchmarks/real_vllm.py [--runs 3] [--fresh]

Reports medians over --runs of:
- scripts/vllm-env.sh reusing the venv (and, with --fresh, making a new one in a temporary
  directory once: the first CI run's install);
- building the tiny models (tests/verify/tiny_models.py);
- importing vLLM's API server in the venv (the floor a start cannot beat);
- a `vllm serve` start of the scripted model with both kimi_k2 parsers, to /health 200, and its
  ratio to the import floor;
- one `kimi-serve verify` run against it.
The real-vLLM tests make three starts, so they cost about: models + 3 starts + 4 verify runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "verify"))

from real_vllm import VllmServer  # noqa: E402

PARSERS = ["--reasoning-parser", "kimi_k2", "--tool-call-parser", "kimi_k2", "--enable-auto-tool-choice"]


def timed(argv: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fresh", action="store_true", help="also time a new venv (minutes)")
    args = parser.parse_args()
    venv = ROOT / ".venv-vllm"
    env_script = ["bash", str(ROOT / "scripts" / "vllm-env.sh")]
    if args.fresh:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"vllm-env.sh, new venv: {timed(env_script + [str(Path(tmp) / 'venv')]):.0f} s")
    timed(env_script + [str(venv)])
    rows = {"vllm-env.sh, reuse": [], "tiny models": [], "import vLLM's API server": [], "vllm serve to ready": [],
            "kimi-serve verify": []}
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        for _ in range(args.runs):
            rows["vllm-env.sh, reuse"].append(timed(env_script + [str(venv)]))
            rows["tiny models"].append(timed([str(venv / "bin" / "python"), "tests/verify/tiny_models.py", tmp]))
            rows["import vLLM's API server"].append(
                timed([str(venv / "bin" / "python"), "-c", "import vllm.entrypoints.openai.api_server"]))
            server = VllmServer(venv, models / "scripted", ("--served-model-name", "kimi-k2.5", *PARSERS),
                                models / "vllm.log")
            try:
                rows["vllm serve to ready"].append(server.wait_ready())
                rows["kimi-serve verify"].append(timed([sys.executable, "-m", "entrypoint", "verify", "--url", server.url,
                                                        "--expect-model", "kimi-k2.5", "--features",
                                                        "tool_calling,reasoning,text_only"]))
            finally:
                server.stop()
    medians = {what: statistics.median(values) for what, values in rows.items()}
    for what, median in medians.items():
        print(f"{what}: median {median:.1f} s over {args.runs} runs ({', '.join(f'{v:.1f}' for v in rows[what])})")
    floor = medians["import vLLM's API server"]
    print(f"start / import floor: {medians['vllm serve to ready'] / floor:.1f}x")
    total = medians["tiny models"] + 3 * medians["vllm serve to ready"] + 4 * medians["kimi-serve verify"]
    print(f"the real-vLLM tests, estimated (models + 3 starts + 4 verify runs): {total:.0f} s")


if __name__ == "__main__":
    main()
