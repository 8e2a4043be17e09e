"""`verify --concurrency N`: the tool-call, thinking and streaming checks again, N streams at once.

The faults of this model family that appear only under load: vLLM's Kimi K2 tool-call parser
returning empty tool-call deltas with 6-14 concurrent streams while single requests are fine
(vllm-project/vllm#54701), and setups that emit one token over and over ("!!!!",
vllm-project/vllm#42426). So every stream is reassembled from its deltas (content, reasoning, each
tool call's id, name and argument fragments) and must give exactly the right tool call or answer,
and no output under load may be one token repeated.

The N requests of a check start together (a barrier) so that their streams overlap; each has its
own client and the check's deadline, one thread each (N is bounded: core/base/limits.py).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from entrypoint.verify.client import CheckFailed, Server, excerpt
from entrypoint.verify.questions import (
    COMPARE_QUESTION, LETTER_QUESTION, SUM_ANSWER, SUM_QUESTION, TOOLS, is_number_only,
)
from entrypoint.verify.report import FAIL, SKIP, ServerCheck

LOAD_CHECKS = ("load_tools", "load_thinking", "load_streaming", "load_degenerate")
TOOL_BUG = "vllm-project/vllm#54701: the Kimi K2 tool-call parser under concurrent streams"
REPEAT_BUG = "vllm-project/vllm#42426: one token repeated"
# One unit of 1-4 characters repeated at least 8 times in a row ...
_REPEAT = re.compile(r"(.{1,4}?)\1{7,}", re.DOTALL)
MIN_REPEAT_CHARS = 16
JOIN_GRACE_S = 5.0  # past the check's deadline, for the streams' own deadlines to end them  # ... covering at least this much and half of the output is degenerate


def _same(a: object, b: object) -> bool:
    return isinstance(a, str) and a.lower() == b


def _numbers(a: object, b: object) -> list:
    return sorted(float(v) for v in (a, b) if isinstance(v, (int, float, str)) and not isinstance(v, bool))


# The tool call each question must reassemble to: (question, function, do the arguments fit exactly)
EXPECTED_CALLS = (
    (LETTER_QUESTION, "count_letter_in_string", lambda args: _same(args.get("a"), "strawberry")
     and _same(args.get("b"), "r")),
    (COMPARE_QUESTION, "compare", lambda args: _numbers(args.get("a"), args.get("b")) == [9.11, 9.9]),
)


def degenerate(text: str) -> str | None:
    """The repeated run when `text` is mostly one token repeated (e.g. '!!!!!!!!'), else None."""
    text = text.strip()
    longest = max((m.group(0) for m in _REPEAT.finditer(text)), key=len, default="")
    if len(longest) >= MIN_REPEAT_CHARS and len(longest) * 2 >= len(text):
        return longest
    return None


@dataclass
class Streamed:
    """One stream reassembled from its deltas."""

    content: str = ""
    reasoning: str = ""
    calls: dict = field(default_factory=dict)  # index -> {"id", "name", "arguments"}
    finish_reason: str | None = None
    chunks: int = 0

    def texts(self) -> list[str]:
        return [self.content, self.reasoning, *(c["arguments"] for c in self.calls.values())]


def reassemble(events: list[dict]) -> Streamed:
    """Concatenate the deltas of choice 0: content, reasoning, and per tool-call index the argument
    fragments (the id, type and name come once, in the call's first delta)."""
    out = Streamed()
    for event in events:
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            out.chunks += 1
            out.content += delta.get("content") or ""
            out.reasoning += delta.get("reasoning") or ""
            for part in delta.get("tool_calls") or []:
                call = out.calls.setdefault(part.get("index", 0), {"id": None, "name": "", "arguments": ""})
                function = part.get("function") or {}
                if part.get("id"):
                    if call["id"] not in (None, part["id"]):
                        raise CheckFailed(f"tool call {part.get('index', 0)} changed its id mid-stream "
                                          f"({call['id']!r} -> {part['id']!r})")
                    call["id"] = part["id"]
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
            out.finish_reason = choice.get("finish_reason") or out.finish_reason
    return out


class LoadRun:
    """The load checks of one verify run; `outputs` gathers every reassembled text for the
    degenerate-output check."""

    def __init__(self, verifier, concurrency: int, timeout: float):
        """`verifier`: the single-request checks' Verifier, run first: the URL, the model name it
        read, the features, the recipe's chat facts, its request bodies and max_tokens budget."""
        self.url, self.features, self.chat = verifier.server.url, verifier.features, verifier.chat
        self.verifier = verifier
        self.n, self.timeout = concurrency, timeout
        self.outputs: list[str] = []
        self.streams = 0

    def checks(self) -> list[tuple[str, Callable[[], str]]]:
        return [("load_tools", self.tools), ("load_thinking", self.thinking), ("load_streaming", self.streaming),
                ("load_degenerate", self.degenerate)]

    # -- the requests -----------------------------------------------------------------------------

    def _body(self, question: str, *, thinking: bool, max_tokens: int, tools: bool = False) -> dict:
        body = self.verifier._body([{"role": "user", "content": question}], thinking=thinking,
                                   max_tokens=self.verifier.budget(max_tokens))
        body.update(stream=True, stream_options={"include_usage": True})
        if tools:
            body.update(tools=[tool.schema() for tool in TOOLS.values()], temperature=0.01, top_p=0.95)
        return body

    def _all_at_once(self, bodies: list[dict]) -> list[Streamed | CheckFailed]:
        """Each body streamed by its own thread, all released together; each outcome in order."""
        outcomes: list = [None] * len(bodies)
        start = threading.Barrier(len(bodies))
        deadline = time.monotonic() + self.timeout

        def one(i: int) -> None:
            server = Server(self.url)
            try:
                start.wait(max(0.0, deadline - time.monotonic()))
                server.begin(max(0.001, deadline - time.monotonic()))
                outcomes[i] = reassemble(server.stream_chat(bodies[i]))
            except CheckFailed as failure:
                outcomes[i] = failure
            except threading.BrokenBarrierError:
                outcomes[i] = CheckFailed("the streams could not be started together in time")
            except Exception as error:  # noqa: BLE001 - a shape no check anticipated is a failed stream
                outcomes[i] = CheckFailed(f"unexpected answer ({type(error).__name__}: {error})")

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(bodies))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, deadline + JOIN_GRACE_S - time.monotonic()))  # all of them: one bound
        outcomes = [o if o is not None else CheckFailed("the stream did not end within the check's time")
                    for o in outcomes]
        for outcome in outcomes:
            if isinstance(outcome, Streamed):
                self.outputs += outcome.texts()
                self.streams += 1
        return outcomes

    def _judge(self, outcomes: list, judge: Callable[[int, Streamed], None], what: str) -> str:
        failures = []
        for i, outcome in enumerate(outcomes):
            try:
                if isinstance(outcome, CheckFailed):
                    raise outcome
                judge(i, outcome)
            except CheckFailed as failure:
                failures.append((i, str(failure)))
        if failures:
            first_i, first = failures[0]
            raise CheckFailed(f"{len(failures)} of {len(outcomes)} concurrent streams went wrong; stream {first_i}: "
                              f"{first}")
        return f"{len(outcomes)} concurrent streams, each {what}"

    # -- the checks -------------------------------------------------------------------------------

    def tools(self) -> str:
        thinking = "reasoning" in self.features
        asked = [EXPECTED_CALLS[i % len(EXPECTED_CALLS)] for i in range(self.n)]
        bodies = [self._body(q, thinking=thinking, max_tokens=4096 if thinking else 1024, tools=True)
                  for q, _f, _ok in asked]
        outcomes = self._all_at_once(bodies)

        def judge(i: int, s: Streamed) -> None:
            _question, function, fits = asked[i]
            if len(s.calls) != 1:
                raise CheckFailed(f"{len(s.calls)} tool calls reassembled, not one {function} call "
                                  f"(content {excerpt(s.content)!r}); {TOOL_BUG}")
            (call,) = s.calls.values()
            if call["name"] != function or not call["id"]:
                raise CheckFailed(f"the tool call reassembled to name {call['name']!r}, id {call['id']!r}, not "
                                  f"{function}; {TOOL_BUG}")
            try:
                args = json.loads(call["arguments"])
            except ValueError:
                raise CheckFailed(f"the {function} arguments reassembled to {excerpt(call['arguments'])!r}, which "
                                  f"is not JSON (empty or lost deltas); {TOOL_BUG}") from None
            if not isinstance(args, dict) or not fits(args):
                raise CheckFailed(f"the {function} arguments reassembled to {excerpt(args)}, not the right call")
            if s.finish_reason != "tool_calls":
                raise CheckFailed(f"the tool-call stream ended with finish_reason {s.finish_reason!r}")

        return self._judge(outcomes, judge, "reassembled to the exact tool call")

    def _answers(self, thinking: bool) -> str:
        bodies = [self._body(SUM_QUESTION, thinking=thinking, max_tokens=4096 if thinking else 256)
                  for _ in range(self.n)]

        def judge(_i: int, s: Streamed) -> None:
            if s.finish_reason is None:
                raise CheckFailed(f"the stream ended after {s.chunks} chunks without a finish_reason")
            if thinking and not s.reasoning:
                raise CheckFailed(f"no reasoning reassembled (the answer was {excerpt(s.content)!r})")
            if not thinking and self.chat.thinking_off is not None and (s.reasoning or "</think>" in s.content):
                switch = json.dumps(self.chat.thinking_off)
                raise CheckFailed(f"instant mode (chat_template_kwargs {switch}) reasoned: "
                                  f"{excerpt(s.reasoning or s.content)!r}")
            if "</think>" in s.content:
                raise CheckFailed(f"the reasoning leaked into content: {excerpt(s.content)!r}")
            if not is_number_only(s.content, SUM_ANSWER):
                raise CheckFailed(f"the answer reassembled to {excerpt(s.content)!r}, not {SUM_ANSWER}")

        return self._judge(self._all_at_once(bodies), judge,
                           f"reassembled to {SUM_ANSWER!r}" + (" after its reasoning" if thinking else ""))

    def thinking(self) -> str:
        return self._answers(thinking=True)

    def streaming(self) -> str:
        return self._answers(thinking=False)

    def degenerate(self) -> str:
        if not self.streams:
            raise CheckFailed("no stream under load completed, so none could be judged")
        runs = [run for run in (degenerate(text) for text in self.outputs) if run]
        if runs:
            raise CheckFailed(f"{len(runs)} outputs under load are one token repeated ({excerpt(runs[0], 40)!r}); "
                              f"{REPEAT_BUG}: possible causes: a kernel or quantization fault under batching, a "
                              "broken KV cache (try without prefix caching or with another attention backend)")
        return f"no output of the {self.streams} streams under load is one token repeated"


def skip_reason(name: str, features: frozenset[str]) -> str | None:
    if name == "load_tools" and "tool_calling" not in features:
        return "the tool_calling feature is off (no tool-call parser)"
    if name == "load_thinking" and "reasoning" not in features:
        return "the reasoning feature is off (no reasoning parser)"
    return None


def run_load(load: LoadRun, timed: Callable[[str, Callable[[], str]], ServerCheck],
             blocked: str | None) -> list[ServerCheck]:
    results = []
    for name, run in load.checks():
        skip = skip_reason(name, load.features)
        if skip:
            results.append(ServerCheck(name, SKIP, skip))
        elif blocked:
            results.append(ServerCheck(name, FAIL, f"not run: {blocked}"))
        else:
            results.append(timed(name, run))
    return results

