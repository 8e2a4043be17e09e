"""Streams through faults (issue 48): streaming clients of a live shape's front that record exactly
what an OpenAI client would see of each stream (every chunk's token ids and text, the finish_reason,
`[DONE]`, an error event, a cut connection), and the fault drills that kill engines under them.

A stream ends in one of three ways, and the drills count each: `complete` (its finish_reason, then
`[DONE]`), `error` (an error event or a cut connection: what OpenAI's SDKs raise), or `silent` (the
response ended without either: a truncated answer that looks complete, the defect this guards).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional

from tests.live.shape import Node, post

SYSTEM = "You are a careful archivist of the harbor; answer at length. "
TOOLS = [{"type": "function", "function": {
    "name": "count_letter_in_string", "description": "Count a letter in a string",
    "parameters": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                   "required": ["a", "b"]}}}]


@dataclass
class Stream:
    """What one client saw of one stream."""

    kind: str  # completions | chat | tools
    status: int = 0
    ids: List[str] = field(default_factory=list)  # every chunk's `id`
    token_ids: List[int] = field(default_factory=list)
    text: str = ""
    reasoning: str = ""
    tool_args: Dict[int, str] = field(default_factory=dict)
    tool_names: Dict[int, str] = field(default_factory=dict)
    finish_reason: Optional[str] = None
    done: bool = False
    error: Optional[str] = None  # an error event's message, or the transport's error
    usage: Optional[dict] = None
    prompt_ids: Optional[List[int]] = None
    started: float = 0.0
    ended: float = 0.0
    first_token_s: Optional[float] = None

    @property
    def outcome(self) -> str:
        if self.error is not None:
            return "error"
        if self.finish_reason is not None and self.done:
            return "complete"
        return "silent"

    def message(self) -> dict:
        return {"content": self.text, "reasoning": self.reasoning,
                "tool_calls": [(self.tool_names.get(i, ""), self.tool_args[i]) for i in sorted(self.tool_args)]}


def request(kind: str, model: str, i: int, max_tokens: int) -> tuple:
    """The request a client of `kind` sends (its path and body), temperature 0, token ids asked for."""
    prompt = f"Question {i}: tell the story of ship number {i} in the harbor archive."
    common = {"model": model, "stream": True, "temperature": 0, "max_tokens": max_tokens, "ignore_eos": True,
              "return_token_ids": True, "stream_options": {"include_usage": True}}
    if kind == "completions":
        return "/v1/completions", {**common, "prompt": SYSTEM + prompt}
    body = {**common, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]}
    if kind == "tools":
        body.update(tools=TOOLS, tool_choice="auto")
    return "/v1/chat/completions", body


def send(url: str, path: str, body: dict, kind: str, timeout: float = 600, seen: Optional[Stream] = None) -> Stream:
    """One streamed request, read as an SSE client reads it (into `seen`, where the caller watches it)."""
    parts = urllib.parse.urlsplit(url)
    seen = seen if seen is not None else Stream(kind=kind, started=time.monotonic())
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        answer = conn.getresponse()
        seen.status = answer.status
        if answer.status != 200:
            seen.error = f"HTTP {answer.status}: {answer.read()[:300]!r}"
            return seen
        data: List[str] = []
        while True:
            line = answer.readline()
            if not line:
                break
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if text.startswith("data:"):
                data.append(text[5:].strip())
                continue
            if text or not data:
                continue
            payload, data = "\n".join(data), []
            if payload == "[DONE]":
                seen.done = True
                continue
            _take(seen, json.loads(payload))
    except (OSError, http.client.HTTPException) as exc:
        seen.error = f"{type(exc).__name__}: {exc}"
    finally:
        seen.ended = time.monotonic()
        conn.close()
    return seen


def _take(seen: Stream, chunk: dict) -> None:
    if chunk.get("error"):
        seen.error = str(chunk["error"].get("message") if isinstance(chunk["error"], dict) else chunk["error"])
        return
    seen.ids.append(chunk.get("id"))
    if chunk.get("prompt_token_ids") and seen.prompt_ids is None:  # chat: the first chunk's
        seen.prompt_ids = list(chunk["prompt_token_ids"])
    if chunk.get("usage"):
        seen.usage = chunk["usage"]
    for choice in chunk.get("choices") or ():
        if seen.first_token_s is None:
            seen.first_token_s = time.monotonic() - seen.started
        if choice.get("prompt_token_ids") and seen.prompt_ids is None:  # completions: the first choice's
            seen.prompt_ids = list(choice["prompt_token_ids"])
        seen.token_ids += choice.get("token_ids") or []
        seen.text += choice.get("text") or ""
        delta = choice.get("delta") or {}
        seen.text += delta.get("content") or ""
        seen.reasoning += delta.get("reasoning") or delta.get("reasoning_content") or ""
        for call in delta.get("tool_calls") or ():
            index = call.get("index", 0)
            function = call.get("function") or {}
            seen.tool_names[index] = seen.tool_names.get(index, "") + (function.get("name") or "")
            seen.tool_args[index] = seen.tool_args.get(index, "") + (function.get("arguments") or "")
        if choice.get("finish_reason") is not None:
            seen.finish_reason = choice["finish_reason"]


KINDS = ("completions", "chat", "tools", "completions")


def baseline(url: str, model: str, count: int, max_tokens: int) -> Dict[int, Stream]:
    """Each request of the drill once, alone: the uninterrupted answers (temperature 0)."""
    out = {}
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        path, body = request(kind, model, i, max_tokens)
        out[i] = send(url, path, body, kind)
        assert out[i].outcome == "complete", asdict(out[i])
    return out


@dataclass
class Drill:
    """What the clients saw through one fault."""

    clients: int
    max_tokens: int
    streams: List[dict] = field(default_factory=list)
    complete: int = 0
    errors: int = 0
    silent: int = 0
    differ_from_baseline: int = 0  # complete streams whose tokens are not the uninterrupted answer's
    # of those, the ones that are not exactly "the answer up to the seam, then what an engine at rest
    # continues from that prefix" (the divergence that is not re-prefill's numerics: the front's)
    differ_from_continuation: int = 0
    # continued streams of the uninterrupted tokens whose message (the front's, from the engines' parsers after
    # the seam) is not the uninterrupted one's
    message_differs: int = 0
    # the same for streams the front never continued: vLLM's own streaming parsers, whose deltas depend on how
    # many tokens a chunk merges when its API server falls behind (recorded, not the front's)
    message_differs_uninterrupted: int = 0
    duplicated_or_missing: int = 0  # complete streams whose token count is not the request's
    ids_per_stream_max: int = 0  # distinct stream ids one client saw (1: one stream)
    usage_wrong: int = 0
    migrations: int = 0
    continued: int = 0
    killed_at_s: Optional[float] = None
    seen: List[Stream] = field(default_factory=list)  # each client's stream (not in the summary)


def summary(drill: Drill) -> dict:
    """The drill's figures for the results file (without the streams' tokens)."""
    return {k: v for k, v in asdict(drill).items() if k != "seen"}


def seams(log: str) -> Dict[str, List[int]]:
    """Where the front continued each stream (its log: `stream ID continued at token K`)."""
    out: Dict[str, List[int]] = {}
    for match in re.finditer(r"stream (\S+) continued at token (\d+)", log):
        out.setdefault(match.group(1), []).append(int(match.group(2)))
    return out


def direct_continuation(url: str, model: str, prefix: List[int], max_tokens: int) -> List[int]:
    """What an engine continues from `prefix` (token ids) at temperature 0, one request at rest."""
    answer = post(url + "/v1/completions", {"model": model, "prompt": prefix, "max_tokens": max_tokens,
                                            "temperature": 0, "ignore_eos": True, "return_token_ids": True})
    return list(answer["choices"][0]["token_ids"])


def run_drill(front_url: str, model: str, clients: int, max_tokens: int, expect: Dict[int, Stream],
              fault: Callable[[], None], fault_after_s: float, metrics_url: Optional[str] = None,
              front_log: Optional[Callable[[], str]] = None, live: Optional[List[Stream]] = None) -> Drill:
    """`clients` streams at once (completions, chat with reasoning, chat with tools), `fault()` called
    `fault_after_s` in, every stream read to its end; compared with `expect` (the baseline). `live`: a
    list the streams are added to as they start, for a caller that watches them (a kill mid-stream)."""
    figures = Drill(clients=clients, max_tokens=max_tokens)
    before = _front_metrics(metrics_url) if metrics_url else {}
    t0 = time.monotonic()

    def one(i: int) -> Stream:
        kind = KINDS[i % len(KINDS)]
        path, body = request(kind, model, i, max_tokens)
        seen = Stream(kind=kind, started=time.monotonic())
        if live is not None:
            live.append(seen)
        return send(front_url, path, body, kind, seen=seen)

    timer = threading.Timer(fault_after_s, fault)
    timer.start()
    with ThreadPoolExecutor(clients) as pool:
        seen = list(pool.map(one, range(clients)))
    timer.join()
    figures.killed_at_s = round(fault_after_s, 1)
    figures.seen = seen
    for i, s in enumerate(seen):
        row = {"kind": s.kind, "outcome": s.outcome, "tokens": len(s.token_ids), "finish_reason": s.finish_reason,
               "error": s.error, "ids": len(set(s.ids)), "seconds": round(s.ended - t0, 1)}
        figures.streams.append(row)
        figures.complete += s.outcome == "complete"
        figures.errors += s.outcome == "error"
        figures.silent += s.outcome == "silent"
        figures.ids_per_stream_max = max(figures.ids_per_stream_max, len(set(s.ids)))
        if s.outcome != "complete":
            continue
        if len(s.token_ids) != max_tokens:
            figures.duplicated_or_missing += 1
        base = expect.get(i)
        if base is not None and s.token_ids == base.token_ids and s.message() != base.message():
            row["seams"] = seams(front_log()).get(s.ids[0], []) if front_log else []
            if row["seams"] or not front_log:
                figures.message_differs += 1
            else:
                figures.message_differs_uninterrupted += 1
            row["message"], row["expected"] = s.message(), base.message()
        if base is not None and s.token_ids != base.token_ids:
            figures.differ_from_baseline += 1
            row["diverges_at"] = next((k for k, (a, b) in enumerate(zip(s.token_ids, base.token_ids)) if a != b),
                                      min(len(s.token_ids), len(base.token_ids)))
            cuts = seams(front_log()).get(s.ids[0], []) if front_log else []
            row["seams"] = cuts
            at = cuts[0] if len(cuts) == 1 else None
            if at is None or s.token_ids[:at] != base.token_ids[:at] or s.prompt_ids is None or \
                    s.token_ids[at:] != direct_continuation(front_url, model, s.prompt_ids + s.token_ids[:at],
                                                            max_tokens - at):
                figures.differ_from_continuation += 1
        if not s.usage or s.usage.get("completion_tokens") != len(s.token_ids) or (
                base is not None and base.usage and s.usage.get("prompt_tokens") != base.usage.get("prompt_tokens")):
            figures.usage_wrong += 1
    if metrics_url:
        after = _front_metrics(metrics_url)
        figures.migrations = int(after.get("kimi_front_migrations_total", 0) - before.get("kimi_front_migrations_total", 0))
        figures.continued = int(after.get("kimi_front_streams_continued_total", 0)
                                - before.get("kimi_front_streams_continued_total", 0))
    return figures


def _front_metrics(url: str) -> Dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:  # noqa: S310 - loopback
        text = answer.read().decode()
    out: Dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def kill(node: Node) -> None:
    """SIGKILL a container's whole process group (its entrypoint's vLLM and every child)."""
    try:
        os.killpg(node.popen.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    node.popen.wait(30)
