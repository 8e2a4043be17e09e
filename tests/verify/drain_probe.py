"""Streams in flight, then SIGTERM to a real vLLM server: what each stream got, what a request
that arrives during the stop is answered, and how the server ended (issue 30, docs/day2.md).

Used by tests/verify/test_real_vllm.py (the launch's drain arguments: every stream completes)
and benchmarks/drain.py (that launch and vLLM's default side by side, with figures). SIGTERM goes
to the server's own process, as `docker stop` and the kubelet send it to the container's PID 1
(the entrypoint execs vLLM), never to its process group.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

PROMPT = "Tell me a long story about the sea."


@dataclass
class Stream:
    chunks: int = 0
    done: bool = False  # the `data: [DONE]` line arrived
    finish_reason: str = ""
    error: str = ""  # what ended it otherwise (a reset, a close without [DONE], the client's timeout)
    ended_s: float = -1.0  # seconds after SIGTERM the stream ended (-1: before it)
    first: threading.Event = field(default_factory=threading.Event)


@dataclass
class Outcome:
    streams: list
    late: dict  # what a request sent during the stop got: {"health": ..., "completion": ...}
    exit_s: float  # seconds from SIGTERM to the server's exit (-1: it had not exited when we gave up)
    returncode: object
    log_lines: list  # the server's lines about its stop (mode=drain / abort, ...)

    @property
    def completed(self) -> int:
        return sum(1 for s in self.streams if s.done and s.finish_reason == "length")

    def as_dict(self) -> dict:
        return {"streams": len(self.streams), "completed": self.completed,
                "cut": len(self.streams) - self.completed,
                "chunks": [s.chunks for s in self.streams], "finish_reasons": [s.finish_reason for s in self.streams],
                "got_done": [s.done for s in self.streams], "stream_errors": [s.error for s in self.streams if s.error],
                "streams_ended_s": [round(s.ended_s, 1) for s in self.streams],
                "exit_s": round(self.exit_s, 1), "returncode": self.returncode, "late_request": self.late,
                "stop_log": self.log_lines}


def _stream(url: str, model: str, tokens: int, timeout_s: float, out: Stream, signalled: list,
            temperature: float = 0.0) -> None:
    parts = urlsplit(url)
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": tokens, "ignore_eos": True,
                       "stream": True, "temperature": temperature, "seed": 0})
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        if answer.status != 200:
            out.error = f"HTTP {answer.status}"
            return
        while True:
            line = answer.readline()
            if not line:
                out.error = out.error or "closed without [DONE]"
                return
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                out.done = True
                return
            event = json.loads(data)
            if "error" in event:
                out.error = f"error event: {event['error'].get('message', '')[:120]}"
                continue
            choice = (event.get("choices") or [{}])[0]
            out.finish_reason = choice.get("finish_reason") or out.finish_reason
            out.chunks += 1
            out.first.set()
    except (socket.timeout, TimeoutError):
        out.error = f"no byte for {timeout_s:.0f} s (the client's timeout)"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:160]
    finally:
        out.first.set()
        out.ended_s = time.monotonic() - signalled[0] if signalled else -1.0
        conn.close()


def _late(url: str, model: str) -> dict:
    """A new request during the stop, as a client the routing has not told yet would send it."""
    parts = urlsplit(url)
    out = {}
    for what, method, path, body in (("health", "GET", "/health", None),
                                     ("completion", "POST", "/v1/completions",
                                      json.dumps({"model": model, "prompt": PROMPT, "max_tokens": 4}))):
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            answer = conn.getresponse()
            text = answer.read(400).decode(errors="replace")
            out[what] = {"status": answer.status, "body": text[:200]}
        except (OSError, http.client.HTTPException) as exc:
            out[what] = {"status": None, "error": f"{type(exc).__name__}: {exc}"[:160]}
        finally:
            conn.close()
    return out


def stop_with_streams(server, model: str, streams: int = 4, tokens: int = 300, client_timeout_s: float = 120,
                      late_after_s: float = 1.0, exit_within_s: float = 600, temperature: float = 0.0) -> Outcome:
    """Start `streams` streaming completions of `tokens` tokens, SIGTERM the server once each has
    its first chunk, send a late request `late_after_s` later, and wait for all of it (bounded).
    `temperature` above 0 keeps n-gram speculative decoding from guessing a looping answer several
    tokens a step (a server that speculates finishes greedy streams sooner)."""
    signalled: list = []
    results = [Stream() for _ in range(streams)]
    threads = [threading.Thread(target=_stream, args=(server.url, model, tokens, client_timeout_s, r, signalled,
                                                      temperature), daemon=True) for r in results]
    for thread in threads:
        thread.start()
    for r in results:
        if not r.first.wait(client_timeout_s):
            raise RuntimeError("a stream never got its first chunk:\n" + server.tail())
    signalled.append(time.monotonic())
    os.kill(server.process.pid, signal.SIGTERM)
    time.sleep(late_after_s)
    late = _late(server.url, model) if server.process.poll() is None else {"server": "already exited"}
    try:
        server.process.wait(exit_within_s)
        exit_s = time.monotonic() - signalled[0]
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: reported, the caller stops it
        exit_s = -1.0
    for thread in threads:
        thread.join(client_timeout_s + 5)
    log = server.log.read_text(errors="replace").splitlines()
    modes = [ln.strip()[-200:] for ln in log if "mode=drain" in ln or "mode=abort" in ln]  # vLLM's own word
    lines = modes + [ln.strip()[-200:] for ln in log if ln.strip()[-200:] not in modes and
                     any(w in ln for w in ("shutdown", "Shutting down", "drain", "abort"))][-6:]
    return Outcome(results, late, exit_s, server.process.poll(), lines)
