#!/usr/bin/env python3
"""How long a bad vLLM argument takes to be refused: kimi-serve (before anything starts) against
vLLM's own `vllm serve` (its parser is reached only after vLLM's imports). Run by hand:

    python benchmarks/refusal.py [--runs 5] [--python VENV/bin/python]

--python: an environment with vLLM (default: the one scripts/vllm-parser-env.sh makes). Reports
medians over --runs of wall time to the exit code, for each case, and the ratio vLLM / kimi-serve.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from buildsys import targets as targets_mod, vllm_spec  # noqa: E402

CASES = {
    "unknown option": ["--tensor-paralel-size", "4"],
    "bad choice": ["--mm-encoder-tp-mode", "datta"],
    "flag as value": ["--served-model-name", "--enforce-eager"],
}
VLLM_MAIN = "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; main()"


def timed(argv, env) -> tuple:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--python", help="Python of an environment with vLLM")
    opts = ap.parse_args()
    python = opts.python or subprocess.run(["bash", str(ROOT / "scripts/vllm-parser-env.sh")], check=True,
                                           capture_output=True, text=True).stdout.strip().splitlines()[-1]
    vllm_env = vllm_spec.extract_env(python)
    data = targets_mod.load()
    hardware = data.targets[data.default_target].hardware  # what scripts/demo.sh builds
    kimi_env = {"PATH": os.environ["PATH"], "KIMI_HARDWARE": hardware, "KIMI_PREFLIGHT": "off", "KIMI_DRY_RUN": "1"}
    print(f"{'case':<16} {'kimi-serve':>12} {'vllm serve':>12} {'ratio':>7}   (medians of {opts.runs} runs; exit codes)")
    for name, args in CASES.items():
        kimi, real = [], []
        for _ in range(opts.runs):
            kimi.append(timed([sys.executable, "-m", "entrypoint", *args], kimi_env))
            real.append(timed([python, "-c", VLLM_MAIN, "serve", "moonshotai/Kimi-K2.5", *args], vllm_env))
        k, r = statistics.median(t for t, _ in kimi), statistics.median(t for t, _ in real)
        print(f"{name:<16} {k:>11.2f}s {r:>11.2f}s {r / k:>6.1f}x   ({kimi[0][1]}, {real[0][1]})")


if __name__ == "__main__":
    main()
