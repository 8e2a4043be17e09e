#!/usr/bin/env python3
"""`kimi-serve download` against the hub library's own CLI (`hf download`), same local Hub
stand-in (tests/weights/hub_standin.py), same files, fresh caches:

    python benchmarks/download.py [--runs 5] [--shards 8] [--shard-mb 32]

Reports medians over --runs of: a full download (seconds, MB/s), a re-run with everything in
place (the "nothing to do" cost), and a resume after one shard went missing; each as
kimi-serve / hf ratios measured in the same run. The Eagle3 draft model is left out
(KIMI_FEATURES=-spec_decoding) so both fetch exactly the same files.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "weights"))

from hub_standin import Hub, kimi_like_repo  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from startup import default_hardware  # noqa: E402

BIN = Path(sys.executable).parent


def timed(argv, env) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return time.perf_counter() - start


def drop_one_shard(hub_cache: Path, repo, shard: str) -> None:
    base = hub_cache / ("models--" + repo.repo_id.replace("/", "--"))
    link = base / "snapshots" / repo.commit / shard
    link.resolve().unlink()
    link.unlink()


def one_run(hub: Hub, repo, wanted, workdir: Path, hf_first: bool, hardware: str) -> dict:
    base_env = {"PATH": os.environ.get("PATH", ""), "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_HUB_DISABLE_UPDATE_CHECK": "1", "HOME": str(workdir)}
    kimi_cache = workdir / "kimi"
    kimi_env = {**base_env, "KIMI_HARDWARE": hardware, "KIMI_FEATURES": "-spec_decoding",
                "KIMI_CACHE_DIR": str(kimi_cache)}
    kimi = [str(BIN / "kimi-serve"), "download"]
    hf_cache = workdir / "hf"
    hf = [str(BIN / "hf"), "download", repo.repo_id, "--cache-dir", str(hf_cache), "--quiet"]
    hf += [arg for path in wanted for arg in ("--include", path)]
    shard = next(p for p in wanted if p.endswith(".safetensors"))
    out = {}
    tools = [("kimi", kimi, kimi_env, kimi_cache / "huggingface" / "hub"), ("hf", hf, base_env, hf_cache)]
    for name, argv, env, cache in tools[::-1] if hf_first else tools:  # alternate: no order bias
        out[f"{name}_full"] = timed(argv, env)
        out[f"{name}_noop"] = timed(argv, env)
        drop_one_shard(cache, repo, shard)
        out[f"{name}_resume"] = timed(argv, env)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mb", type=int, default=32)
    parser.add_argument("--hardware", help="KIMI_HARDWARE (default: the default image target's, as startup.py)")
    args = parser.parse_args()
    hardware = args.hardware or default_hardware()
    repo, wanted = kimi_like_repo(shards=args.shards, shard_bytes=args.shard_mb * 1024 * 1024)
    total = sum(len(repo.files[p]) for p in wanted)
    runs = []
    with Hub([repo]) as hub:
        for i in range(args.runs):
            workdir = Path(tempfile.mkdtemp(prefix="kimi-dl-bench-"))
            try:
                runs.append(one_run(hub, repo, wanted, workdir, hf_first=i % 2 == 1, hardware=hardware))
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(f"{len(wanted)} files, {total / 1e6:.0f} MB, {args.runs} runs (medians), local stand-in hub")
    print(f"{'':22}{'kimi-serve':>12}{'hf download':>13}{'ratio':>8}")
    for label, key in (("full download s", "full"), ("re-run, complete s", "noop"), ("resume 1 shard s", "resume")):
        k, h = med[f"kimi_{key}"], med[f"hf_{key}"]
        print(f"{label:22}{k:12.2f}{h:13.2f}{k / h:8.2f}")
    print(f"{'throughput MB/s':22}{total / 1e6 / med['kimi_full']:12.0f}{total / 1e6 / med['hf_full']:13.0f}"
          f"{med['hf_full'] / med['kimi_full']:8.2f}")


if __name__ == "__main__":
    main()
