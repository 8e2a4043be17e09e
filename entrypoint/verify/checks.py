"""Verify a running Kimi-K2.5 server: health, model name, chat, reasoning, tools, images, streaming.

Every check ends as pass, fail or skip (with why). A server that refuses connections, hangs past
the timeout or answers garbage yields a failed check, never an exception.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from collections.abc import Callable, Iterator

PASS, FAIL, SKIP = "pass", "fail", "skip"

# The recipe's feature ids (recipes/kimi-k2.5.yaml).
FEATURES = ("tool_calling", "reasoning", "spec_decoding", "text_only", "encoder_parallel")

QUESTION = "What is 17 + 25? Reply with the number only."
THINKING_MAX_TOKENS = 4096  # thinking spends most of the budget before the answer
ANSWER_MAX_TOKENS = 256
MAX_TOOL_ROUNDS = 3


class CheckFailed(Exception):
    """The server did not answer the way users need; the message says how and what to do."""


# --- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # pass | fail | skip
    latency_ms: float | None = None
    tokens: int | None = None  # completion tokens the check used, when the server reported usage
    detail: str = ""


@dataclass(frozen=True)
class VerifyReport:
    url: str
    model: str | None  # the model name the checks sent
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.status != FAIL for check in self.checks)

    def to_json(self) -> dict:
        return {
            "url": self.url,
            "model": self.model,
            "ok": self.ok,
            "checks": [asdict(check) for check in self.checks],
        }

    def to_text(self) -> str:
        from entrypoint.core.table import text_table

        rows = []
        for c in self.checks:
            latency = "-" if c.latency_ms is None else f"{c.latency_ms:.0f} ms"
            tokens = "-" if c.tokens is None else str(c.tokens)
            rows.append((c.name, c.status.upper(), latency, tokens, c.detail))
        lines = [f"kimi-serve verify {self.url} (model: {self.model or 'unknown'})",
                 text_table(("CHECK", "STATUS", "LATENCY", "TOKENS", "DETAIL"), rows, right=(2, 3))]
        counts = {s: sum(c.status == s for c in self.checks) for s in (PASS, FAIL, SKIP)}
        verdict = "OK" if self.ok else "FAILED"
        lines.append(f"{verdict}: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped")
        return "\n".join(lines)


# --- talking to the server ----------------------------------------------------------------------


def _excerpt(value: object, limit: int = 120) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Server:
    """The server under test: JSON over HTTP with a timeout; every failure becomes CheckFailed."""

    def __init__(self, url: str, timeout: float):
        import httpx  # imported here so that other kimi-serve commands don't pay for it

        self._httpx = httpx
        self._client = httpx.Client(base_url=url, timeout=timeout)
        self.url = url
        self.timeout = timeout
        self.tokens: int | None = None  # completion tokens since the last reset

    def close(self) -> None:
        self._client.close()

    def get(self, path: str):
        return self._send("GET", path)

    def get_json(self, path: str) -> object:
        return self._json(self._send("GET", path), path)

    def chat(self, body: dict) -> dict:
        answer = self._json(self._send("POST", "/v1/chat/completions", json=body), "chat completion")
        if not isinstance(answer, dict):
            raise CheckFailed(f"chat completion is not a JSON object: {_excerpt(answer)}")
        self._count(answer.get("usage"))
        return answer

    def stream_chat(self, body: dict) -> list[dict]:
        """POST a streaming chat completion; return its server-sent events up to `data: [DONE]`."""
        events = []
        with self._transport("streaming chat completion"):
            with self._client.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    response.read()
                    self._require_ok(response, "streaming chat completion")
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[len("data:") :].strip()
                    if data == "[DONE]":
                        break
                    events.append(self._event(data))
        for event in events:
            self._count(event.get("usage"))
        return events

    def _send(self, method: str, path: str, **kwargs):
        with self._transport(path):
            response = self._client.request(method, path, **kwargs)
        self._require_ok(response, path)
        return response

    @contextmanager
    def _transport(self, what: str) -> Iterator[None]:
        """Turn httpx's transport errors (refused, timed out, reset) into CheckFailed."""
        httpx = self._httpx
        try:
            yield
        except httpx.TimeoutException:
            reason = f"no answer within {self.timeout:g} s (the server hangs or is overloaded)"
        except httpx.ConnectError as error:
            reason = f"cannot connect ({error}); is the server running at {self.url}?"
        except httpx.HTTPError as error:
            reason = f"{type(error).__name__}: {error}"
        else:
            return
        raise CheckFailed(f"{what}: {reason}")

    def _count(self, usage: object) -> None:
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(tokens, int):
            self.tokens = (self.tokens or 0) + tokens

    @staticmethod
    def _require_ok(response, what: str) -> None:
        if response.status_code == 200:
            return
        try:
            body = response.json()
            error = body.get("error", body)
            message = error.get("message", body) if isinstance(error, dict) else error
        except (ValueError, AttributeError):
            message = response.text
        raise CheckFailed(f"{what}: HTTP {response.status_code}: {_excerpt(message)}")

    @staticmethod
    def _json(response, what: str) -> object:
        try:
            return response.json()
        except ValueError:
            raise CheckFailed(f"{what}: the answer is not JSON: {_excerpt(response.text)}") from None

    @staticmethod
    def _event(data: str) -> dict:
        try:
            event = json.loads(data)
        except ValueError:
            raise CheckFailed(f"the stream sent an event that is not JSON: {_excerpt(data)}") from None
        if not isinstance(event, dict):
            raise CheckFailed(f"the stream sent an event that is not a JSON object: {_excerpt(event)}")
        if "error" in event:
            raise CheckFailed(f"the stream sent an error: {_excerpt(event['error'])}")
        return event


@dataclass(frozen=True)
class _Reply:
    """choices[0] of a chat completion."""

    message: dict
    finish_reason: str | None

    @classmethod
    def parse(cls, answer: dict) -> _Reply:
        choices = answer.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise CheckFailed(f"the chat completion has no choices[0].message: {_excerpt(answer)}")
        return cls(message, choice.get("finish_reason"))

    @property
    def content(self) -> str:
        return self.message.get("content") or ""

    @property
    def reasoning(self) -> str:
        # vLLM names the field reasoning_content; newer versions name it reasoning.
        return self.message.get("reasoning_content") or self.message.get("reasoning") or ""

    @property
    def tool_calls(self) -> list:
        return self.message.get("tool_calls") or []


# --- what the checks send -----------------------------------------------------------------------


def solid_png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A one-colour RGB PNG, written by hand (signature, IHDR, IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    scanline = b"\x00" + bytes(rgb) * width  # filter type 0 per row
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(scanline * height))
        + chunk(b"IEND", b"")
    )


def _number(value: object) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a number")
    return float(value) if isinstance(value, str) else value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def _compare(a: float, b: float) -> str:
    if a == b:
        return f"{a} is equal to {b}"
    larger, smaller = (a, b) if a > b else (b, a)
    return f"{larger} is greater than {smaller}"


def _count_letter(a: str, b: str) -> str:
    if len(b) != 1:
        raise ValueError(f"b must be one letter, not {b!r}")
    return f"The letter '{b}' appears {a.lower().count(b.lower())} times in '{a}'."


@dataclass(frozen=True)
class Tool:
    """One of the article's four functions: its schema for the model and its local implementation."""

    name: str
    description: str
    params: dict  # argument -> (JSON schema type, description)
    run: Callable[..., object]

    def schema(self) -> dict:
        properties = {arg: {"type": kind, "description": desc} for arg, (kind, desc) in self.params.items()}
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {"type": "object", "properties": properties, "required": list(self.params)},
            },
        }

    def call(self, arguments: str) -> str:
        """Run the function on the model's JSON arguments (no eval); CheckFailed if they don't fit."""
        try:
            args = json.loads(arguments)
        except (TypeError, ValueError):
            raise CheckFailed(f"{self.name}: arguments are not valid JSON: {_excerpt(arguments)}") from None
        if not isinstance(args, dict) or set(args) != set(self.params):
            raise CheckFailed(f"{self.name}: arguments must be {sorted(self.params)}, got {_excerpt(args)}")
        convert = {"number": _number, "string": _text}
        try:
            values = {arg: convert[kind](args[arg]) for arg, (kind, _desc) in self.params.items()}
            return str(self.run(**values))
        except ValueError as error:
            raise CheckFailed(f"{self.name}: unusable arguments {_excerpt(args)}: {error}") from None


TOOLS = {
    tool.name: tool
    for tool in (
        Tool("add", "Compute the sum of two numbers",
             {"a": ("number", "A number"), "b": ("number", "A number")}, lambda a, b: a + b),
        Tool("mul", "Compute the product of two numbers",
             {"a": ("number", "A number"), "b": ("number", "A number")}, lambda a, b: a * b),
        Tool("compare", "Compare two numbers and say which one is greater",
             {"a": ("number", "A number"), "b": ("number", "A number")}, _compare),
        Tool("count_letter_in_string", "Count how many times a letter appears in a string",
             {"a": ("string", "The source string"), "b": ("string", "The letter")}, _count_letter),
    )
}


def run_tool_call(call: object) -> tuple[str, str]:
    """Execute one structured tool call locally: (function name, result text)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or function.get("name") not in TOOLS:
        raise CheckFailed(f"the tool call does not name one of the offered functions: {_excerpt(call)}")
    return function["name"], TOOLS[function["name"]].call(function.get("arguments"))


def says_three(answer: str) -> bool:
    return re.search(r"\b(3|three)\b", answer, re.IGNORECASE) is not None


def says_nine_point_nine(answer: str) -> bool:
    names_it = re.search(r"(?<![\d.])9\.90*(?!\d)", answer) is not None
    wrong = re.search(r"9\.11\s+is\s+(the\s+)?(larger|greater|bigger)", answer, re.IGNORECASE)
    return names_it and not wrong


def looks_like_path(model_id: str) -> bool:
    """A model id that is a filesystem path (vLLM's default without --served-model-name)."""
    return model_id.startswith(("/", "./", "../", "~")) or model_id.count("/") > 1 or "\\" in model_id


# --- the checks ---------------------------------------------------------------------------------

PATH_HINT = (
    "the server was started without --served-model-name, so clients must send a filesystem "
    "path as the model name; restart vLLM with --served-model-name {name}"
)
PARSER_HINTS = {
    "reasoning": "start vLLM with --reasoning-parser kimi_k2",
    "tool_calling": "start vLLM with --tool-call-parser kimi_k2 --enable-auto-tool-choice",
}


def _skip_reason(check: str, features: frozenset[str]) -> str | None:
    if check == "chat_thinking" and "reasoning" not in features:
        return "the reasoning feature is off (no reasoning parser)"
    if check.startswith("tools_") and "tool_calling" not in features:
        return "the tool_calling feature is off (no tool-call parser)"
    if check == "image" and "text_only" in features:
        return "text_only is on (no vision encoder)"
    return None


def _user(content: object) -> dict:
    return {"role": "user", "content": content}


def _no_think_markup(reply: _Reply) -> None:
    if "<think>" in reply.content or "</think>" in reply.content:
        raise CheckFailed(
            f"content carries <think> markup: {_excerpt(reply.content)}; {PARSER_HINTS['reasoning']}"
        )


class _Verifier:
    def __init__(self, server: _Server, model: str | None, expected_model: str | None, features):
        self.server = server
        self.model = model
        self.expected_model = expected_model
        self.features = features

    def checks(self) -> list[tuple[str, Callable[[], str]]]:
        return [
            ("health", self.health),
            ("models", self.models),
            ("chat_thinking", self.chat_thinking),
            ("chat_instant", self.chat_instant),
            ("tools_count_letter", self.tools_count_letter),
            ("tools_compare", self.tools_compare),
            ("image", self.image),
            ("streaming", self.streaming),
        ]

    def health(self) -> str:
        self.server.get("/health")
        return "/health answered 200"

    def models(self) -> str:
        listing = self.server.get_json("/v1/models")
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
            raise CheckFailed(f"/v1/models has no list of models with ids: {_excerpt(listing)}")
        ids = [m["id"] for m in data]
        if self.model is None:  # read the name to send, don't assume it
            self.model = ids[0] if len(ids) == 1 else (self.expected_model if self.expected_model in ids else None)
        if len(ids) != 1:
            raise CheckFailed(f"/v1/models lists {len(ids)} models ({', '.join(ids) or 'none'}), not exactly one")
        served = ids[0]
        if looks_like_path(served):
            hint = PATH_HINT.format(name=self.expected_model or "<name>")
            raise CheckFailed(f"the model id {served!r} is a path: {hint}")
        if self.expected_model and served != self.expected_model:
            raise CheckFailed(
                f"the server serves {served!r} but the configuration expects {self.expected_model!r} "
                "(vLLM's --served-model-name)"
            )
        if self.model != served:
            raise CheckFailed(f"the model name to send, {self.model!r}, is not the one served ({served!r})")
        return f"one model: {served}"

    def chat_thinking(self) -> str:
        reply = self._chat([_user(QUESTION)], thinking=True, max_tokens=THINKING_MAX_TOKENS)
        _no_think_markup(reply)
        if not reply.content:
            if reply.finish_reason == "length":
                raise CheckFailed(f"no answer: max_tokens={THINKING_MAX_TOKENS} ran out while thinking")
            raise CheckFailed("the answer (content) is empty")
        if not reply.reasoning:
            raise CheckFailed(f"no reasoning_content or reasoning field; {PARSER_HINTS['reasoning']}")
        return f"answer {_excerpt(reply.content, 40)!r} after {len(reply.reasoning)} chars of reasoning"

    def chat_instant(self) -> str:
        reply = self._chat([_user(QUESTION)], thinking=False, max_tokens=ANSWER_MAX_TOKENS)
        _no_think_markup(reply)
        if reply.reasoning:
            raise CheckFailed(
                f'instant mode ("thinking": false) still returned reasoning: {_excerpt(reply.reasoning)}'
            )
        if not reply.content:
            raise CheckFailed(f"the answer (content) is empty (finish_reason {reply.finish_reason!r})")
        return f"answer {_excerpt(reply.content, 40)!r}, no reasoning"

    def tools_count_letter(self) -> str:
        return self.tool_round_trip("How many r's are in the word strawberry?", says_three, "3")

    def tools_compare(self) -> str:
        return self.tool_round_trip("Which is larger, 9.11 or 9.9?", says_nine_point_nine, "9.9")

    def tool_round_trip(self, prompt: str, is_right: Callable[[str], bool], expected: str) -> str:
        """Offer the tools, run the calls locally, send the results back, judge the final answer."""
        messages = [_user(prompt)]
        reply = self._tool_chat(messages)
        if not reply.tool_calls:
            raise CheckFailed(
                f"no structured tool call (finish_reason {reply.finish_reason!r}, content "
                f"{_excerpt(reply.content)!r}); {PARSER_HINTS['tool_calling']}"
            )
        calls = []
        for _round in range(MAX_TOOL_ROUNDS):
            if not reply.tool_calls:
                break
            if reply.finish_reason != "tool_calls":
                raise CheckFailed(f"tool calls came with finish_reason {reply.finish_reason!r}, not 'tool_calls'")
            messages.append({"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls})
            for call in reply.tool_calls:
                name, result = run_tool_call(call)
                calls.append(name)
                messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": result})
            reply = self._tool_chat(messages)
        if reply.tool_calls:
            raise CheckFailed(f"still calling tools after {MAX_TOOL_ROUNDS} rounds: {', '.join(calls)}")
        _no_think_markup(reply)
        if not is_right(reply.content):
            raise CheckFailed(f"final answer {_excerpt(reply.content)!r} does not give {expected}")
        return f"{' + '.join(calls)} -> {_excerpt(reply.content, 60)!r}"

    def image(self) -> str:
        png = base64.b64encode(solid_png(64, 64, (220, 30, 30))).decode("ascii")
        content = [
            {"type": "text", "text": "What colour is this image? Answer in one word."},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        ]
        reply = self._chat([_user(content)], thinking=False, max_tokens=ANSWER_MAX_TOKENS)
        if not reply.content:
            raise CheckFailed(f"empty answer to an image (finish_reason {reply.finish_reason!r})")
        return f"answer {_excerpt(reply.content, 40)!r}"

    def streaming(self) -> str:
        body = self._body([_user(QUESTION)], thinking=False, max_tokens=ANSWER_MAX_TOKENS)
        body.update(stream=True, stream_options={"include_usage": True})
        chunks, finish_reason = 0, None
        for event in self.server.stream_chat(body):
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
                    chunks += 1
                finish_reason = choice.get("finish_reason") or finish_reason
        if not chunks:
            raise CheckFailed("the stream carried no content chunks")
        if finish_reason is None:
            raise CheckFailed(f"the stream ended after {chunks} chunks without a finish_reason")
        return f"content chunks: {chunks}, finish_reason {finish_reason!r}"

    def _body(self, messages: list, *, thinking: bool, max_tokens: int) -> dict:
        return {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "chat_template_kwargs": {"thinking": thinking},
        }

    def _chat(self, messages: list, *, thinking: bool, max_tokens: int) -> _Reply:
        return _Reply.parse(self.server.chat(self._body(messages, thinking=thinking, max_tokens=max_tokens)))

    def _tool_chat(self, messages: list) -> _Reply:
        # The article's settings: near-greedy so that the tool choice is deterministic.
        thinking = "reasoning" in self.features
        body = self._body(messages, thinking=thinking, max_tokens=THINKING_MAX_TOKENS if thinking else 1024)
        body.update(tools=[tool.schema() for tool in TOOLS.values()], temperature=0.01, top_p=0.95)
        return _Reply.parse(self.server.chat(body))


# --- running them -------------------------------------------------------------------------------


def _timed(name: str, run: Callable[[], str], server: _Server) -> Check:
    server.tokens = None
    start = time.perf_counter()
    try:
        status, detail = PASS, run()
    except CheckFailed as failure:
        status, detail = FAIL, str(failure)
    except Exception as error:  # a shape no check anticipated must still be a failed check
        status, detail = FAIL, f"unexpected answer ({type(error).__name__}: {error})"
    latency_ms = round((time.perf_counter() - start) * 1000, 1)
    return Check(name, status, latency_ms, server.tokens, detail)


def normalize_url(url: str) -> str:
    """The server root, also when given as the OpenAI base URL (…/v1)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def run_verify(
    url: str,
    *,
    model: str | None,
    expected_model: str | None,
    features: frozenset[str],
    timeout: float,
) -> VerifyReport:
    """Run every check against the server at url; checks that don't apply to features are skipped."""
    url = normalize_url(url)
    server = _Server(url, timeout)
    verifier = _Verifier(server, model, expected_model, features)
    results: list[Check] = []
    blocked = None  # why the remaining checks cannot run
    try:
        for name, run in verifier.checks():
            skip = _skip_reason(name, features)
            if skip:
                results.append(Check(name, SKIP, detail=skip))
                continue
            if blocked:
                results.append(Check(name, FAIL, detail=f"not run: {blocked}"))
                continue
            check = _timed(name, run, server)
            results.append(check)
            if name == "health" and check.status == FAIL:
                blocked = "the server failed /health"
            elif name == "models" and verifier.model is None:
                blocked = "no model name to send (/v1/models did not name one; pass --model)"
    finally:
        server.close()
    return VerifyReport(url, verifier.model, tuple(results))
