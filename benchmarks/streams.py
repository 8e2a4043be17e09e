"""The stream front's overhead, side by side with vllm-router alone, in one run (issue 48).

Two stand-in engines stream tokens at a fixed pace (`--token-ms`, 20 ms: 50 tokens/s a stream, the
chunk shape of vLLM 0.32.0's /v1/completions with `return_token_ids`), so the engines cost the same in
both arms and nothing but the front differs; the real vllm-router (the vllm-contract extra) routes to
both; `kimi-serve front` stands before it as the router's container runs it. Each concurrency (1, 8, 32
streams at once) runs both arms interleaved, `--rounds` times: TTFT p50/p99, inter-token latency p50/p99
and throughput per arm, their differences, and the front's CPU per chunk (its process's user+system
time over the chunks it sent: the chunks per second one core of the front relays, to size it).

    python benchmarks/streams.py [--out benchmarks/results/streams-DATE.json] [--plot PNG]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- the stand-in engine


def engine(port: int, token_ms: float) -> None:
    """A stand-in vLLM engine: /health, /v1/models, and streamed /v1/completions paced at token_ms."""
    from aiohttp import web

    async def handle(request: web.Request):
        if request.method == "GET":
            if request.path == "/v1/models":
                return web.json_response({"data": [{"id": "m", "max_model_len": 4096}]})
            return web.Response(text="ok")
        body = await request.json()
        prompt = body.get("prompt")
        start = len(prompt) - 3 if isinstance(prompt, list) else 0
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        budget = int(body.get("max_tokens") or 16)
        for n in range(budget):
            await asyncio.sleep(token_ms / 1000)
            choice = {"index": 0, "text": f" t{start + n}", "logprobs": None,
                      "finish_reason": "length" if n + 1 == budget else None, "stop_reason": None,
                      "token_ids": [1000 + start + n] if body.get("return_token_ids") else None}
            if n == 0 and body.get("return_token_ids"):
                choice["prompt_token_ids"] = [1, 2, 3]
            chunk = {"id": "cmpl-x", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 3, "completion_tokens": budget, "total_tokens": 3 + budget}
            await response.write(b"data: " + json.dumps({"id": "cmpl-x", "choices": [], "usage": usage}).encode()
                                 + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("*", "/{t:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# ---------------------------------------------------------------- the client


async def _one(session, url: str, tokens: int) -> Dict[str, float]:
    t0 = time.perf_counter()
    stamps: List[float] = []
    body = {"model": "m", "prompt": "hello", "max_tokens": tokens, "stream": True, "temperature": 0}
    async with session.post(url + "/v1/completions", json=body) as answer:
        async for line in answer.content:
            if line.startswith(b"data: {"):
                stamps.append(time.perf_counter())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"ttft": stamps[0] - t0, "gaps": gaps, "tokens": len(stamps), "end": stamps[-1] - t0}


async def _wave(url: str, streams: int, tokens: int) -> Dict[str, object]:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600),
                                     connector=aiohttp.TCPConnector(limit=0)) as session:
        t0 = time.perf_counter()
        done = await asyncio.gather(*[_one(session, url, tokens) for _ in range(streams)])
        took = time.perf_counter() - t0
    return {"ttft": [d["ttft"] for d in done], "gaps": [g for d in done for g in d["gaps"]],
            "tokens": sum(d["tokens"] for d in done), "seconds": took}


def _pct(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait(url: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):  # noqa: S310 - loopback
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} not healthy in {timeout} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,32", help="streams at once, comma list (default 1,8,32)")
    parser.add_argument("--tokens", type=int, default=100, help="tokens a stream (default 100)")
    parser.add_argument("--token-ms", type=float, default=20.0, help="the engines' pace (default 20 ms: 50 tokens/s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both arms per concurrency (default 3)")
    parser.add_argument("--out", default=None, help="write the figures (JSON) here")
    parser.add_argument("--plot", default=None, help="write a PNG of the figures here (matplotlib)")
    parser.add_argument("--engine", type=int, default=None, help=argparse.SUPPRESS)  # the stand-in, internal
    args = parser.parse_args(argv)
    if args.engine:
        engine(args.engine, args.token_ms)
        return 0
    router_exe = shutil.which("vllm-router") or str(Path(sys.executable).with_name("vllm-router"))
    kimi = shutil.which("kimi-serve") or str(Path(sys.executable).with_name("kimi-serve"))
    procs: List[subprocess.Popen] = []
    try:
        engines = [_free_port(), _free_port()]
        for port in engines:
            procs.append(subprocess.Popen([sys.executable, __file__, "--engine", str(port), "--token-ms",
                                           str(args.token_ms)], start_new_session=True))
        for port in engines:
            _wait(f"http://127.0.0.1:{port}")
        router_port, front_port, metrics = _free_port(), _free_port(), _free_port()
        procs.append(subprocess.Popen([router_exe, "--policy", "round_robin", "--worker-urls",
                                       *[f"http://127.0.0.1:{p}" for p in engines], "--host", "127.0.0.1",
                                       "--port", str(router_port), "--prometheus-port", str(metrics)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        front = subprocess.Popen([kimi, "front", "--host", "127.0.0.1", "--port", str(front_port), "--upstream",
                                  f"http://127.0.0.1:{router_port}", "--drain-s", "5"], start_new_session=True)
        procs.append(front)
        arms = {"router": f"http://127.0.0.1:{router_port}", "front": f"http://127.0.0.1:{front_port}"}
        for url in arms.values():
            _wait(url)
        asyncio.run(_wave(arms["front"], 4, 10))  # warm both
        rows = []
        for streams in [int(c) for c in args.concurrency.split(",")]:
            got: Dict[str, List[dict]] = {"router": [], "front": []}
            front_cpu, front_chunks = 0.0, 0
            for _ in range(args.rounds):
                for arm in ("router", "front"):
                    cpu = _cpu_s(front.pid)
                    wave = asyncio.run(_wave(arms[arm], streams, args.tokens))
                    if arm == "front":
                        front_cpu += _cpu_s(front.pid) - cpu
                        front_chunks += wave["tokens"]
                    got[arm].append(wave)
            row = {"streams": streams}
            for arm, waves in got.items():
                ttft = [t for w in waves for t in w["ttft"]]
                gaps = [g for w in waves for g in w["gaps"]]
                row[arm] = {"ttft_p50_ms": round(_pct(ttft, 0.5) * 1000, 2), "ttft_p99_ms": round(_pct(ttft, 0.99) * 1000, 2),
                            "itl_p50_ms": round(_pct(gaps, 0.5) * 1000, 2), "itl_p99_ms": round(_pct(gaps, 0.99) * 1000, 2),
                            "tokens_per_s": round(statistics.median(w["tokens"] / w["seconds"] for w in waves), 1)}
            row["front_minus_router"] = {
                "ttft_p50_ms": round(row["front"]["ttft_p50_ms"] - row["router"]["ttft_p50_ms"], 2),
                "itl_p50_ms": round(row["front"]["itl_p50_ms"] - row["router"]["itl_p50_ms"], 2),
                "throughput_pct": round(100 * (row["front"]["tokens_per_s"] / row["router"]["tokens_per_s"] - 1), 2)}
            row["front_cpu_s"] = round(front_cpu, 2)
            row["front_chunks_per_cpu_s"] = round(front_chunks / front_cpu) if front_cpu else None
            rows.append(row)
            print(json.dumps(row), flush=True)
        result = {"what": "the stream front's overhead: the same streams through vllm-router alone and through "
                          "kimi-serve front before it, interleaved, against stand-in engines paced at "
                          f"{args.token_ms} ms a token (so nothing but the front differs)",
                  "command": "python benchmarks/streams.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "tokens_per_stream": args.tokens, "rounds": args.rounds,
                  "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
                  "date": time.strftime("%Y-%m-%d"), "rows": rows}
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        if args.plot:
            _plot(rows, args.plot)
        return 0
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _plot(rows: List[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    xs = [r["streams"] for r in rows]
    for arm, style in (("router", "o-"), ("front", "s--")):
        label = "vllm-router alone" if arm == "router" else "stream front + vllm-router"
        axes[0].plot(xs, [r[arm]["ttft_p50_ms"] for r in rows], style, label=label)
        axes[1].plot(xs, [r[arm]["itl_p99_ms"] for r in rows], style, label=label)
        axes[2].plot(xs, [r[arm]["tokens_per_s"] for r in rows], style, label=label)
    for ax, title in zip(axes, ("TTFT p50 (ms)", "inter-token latency p99 (ms)", "throughput (tokens/s)")):
        ax.set_title(title)
        ax.set_xlabel("concurrent streams")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
