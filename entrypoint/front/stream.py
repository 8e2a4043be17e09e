"""What the stream front knows of an OpenAI stream, pure (no I/O): which requests it can continue on
another engine and why not, how it asks for the rest, and how it rewrites the chunks it relays so a
continued stream reads as one (docs/fleet.md "Streams through faults").

A stream is continued from the token ids already generated: the front asks the engines for them
(`return_token_ids`: vLLM 0.32+ answers the prompt's ids in the first chunk and each chunk's new ids),
and on a cut sends `/v1/completions` the prompt's ids followed by the generated ids with the
remaining budget: an exact continuation at temperature 0 (vLLM's prefix is the same tokens), the
same distribution otherwise. What a continuation cannot reproduce is refused up front (`reason`)
and, if its engine dies, ends with an explicit error naming why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
STREAMED = (COMPLETIONS, CHAT)
DONE = "[DONE]"

# Request fields whose answer a continuation cannot give exactly, and why (docs/fleet.md). A field
# counts when present with a value other than its default (None, False, 0, 1 for n/best_of, "text"
# for response_format's type).
NOT_CONTINUABLE: Tuple[Tuple[str, str], ...] = (
    ("n", "n > 1: several choices share one stream"),
    ("best_of", "best_of > 1: the choices are ranked over the whole answers"),
    ("logprobs", "logprobs: the continuation cannot recompute what was already sent"),
    ("top_logprobs", "logprobs: the continuation cannot recompute what was already sent"),
    ("prompt_logprobs", "prompt_logprobs: the continuation's prompt is not the request's"),
    ("echo", "echo: the continuation's prompt is not the request's"),
    ("suffix", "suffix: completions with a suffix are not continued"),
    ("response_format", "structured output: the grammar's state would restart on the new engine"),
    ("structured_outputs", "structured output: the grammar's state would restart on the new engine"),
    ("guided_json", "structured output: the grammar's state would restart on the new engine"),
    ("guided_regex", "structured output: the grammar's state would restart on the new engine"),
    ("guided_choice", "structured output: the grammar's state would restart on the new engine"),
    ("guided_grammar", "structured output: the grammar's state would restart on the new engine"),
)
_DEFAULTS: Dict[str, Any] = {"n": 1, "best_of": 1}
# Sampling fields a continuation carries over as they were (vLLM's CompletionRequest has each).
SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "ignore_eos",
            "presence_penalty", "frequency_penalty", "repetition_penalty", "skip_special_tokens",
            "spaces_between_special_tokens", "include_stop_str_in_output", "bad_words", "allowed_token_ids",
            "logit_bias", "user", "priority", "cache_salt", "truncate_prompt_tokens")
# A request's default budget where it gives none: vLLM's CompletionRequest max_tokens default (16);
# a chat request without one generates up to the context (None: the continuation gives none either).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


def reason(path: str, body: Dict[str, Any]) -> Optional[str]:
    """Why this streamed request cannot be continued on another engine, or None when it can."""
    if path == COMPLETIONS:
        prompt = body.get("prompt")
        if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt and
                                            all(isinstance(t, int) for t in prompt))):
            return "a batch of prompts: each is its own answer in one stream"
    for name, why in NOT_CONTINUABLE:
        value = body.get(name)
        if value is None or value is False or value == _DEFAULTS.get(name, 0):
            continue
        if name == "response_format" and isinstance(value, dict) and value.get("type") in (None, "text"):
            continue
        if name == "logprobs" and path == CHAT and value is False:
            continue
        return why
    if path == CHAT and (body.get("tool_choice") == "required" or isinstance(body.get("tool_choice"), dict)):
        return "structured output: a forced tool call's grammar would restart on the new engine"
    return None


def upstream_body(body: Dict[str, Any], continuable: bool) -> Dict[str, Any]:
    """The request as the front sends it: the client's, asking for the token ids it continues from
    (when it can continue) and for the usage (always: the front counts the whole answer)."""
    out = dict(body)
    options = dict(out.get("stream_options") or {})
    options["include_usage"] = True
    out["stream_options"] = options
    if continuable:
        out["return_token_ids"] = True
    return out


@dataclass
class Progress:
    """What one stream has given the client so far."""

    path: str
    body: Dict[str, Any]  # the client's request
    continuable: Optional[str]  # None: it can be continued; else why not
    prompt_ids: Optional[List[int]] = None  # the prompt as the engine tokenized it
    generated: List[int] = field(default_factory=list)  # every token id generated, in order
    first_id: Optional[str] = None  # the stream's id, as the client first saw it
    created: Optional[int] = None
    finish_reason: Optional[str] = None
    stop_reason: Any = None
    prompt_tokens: Optional[int] = None
    attempts: int = 0  # engines the stream was continued on
    restarts: int = 0  # times it was sent again whole: its engine stopped before the first chunk
    role_sent: bool = False  # chat: the assistant role delta was sent
    chat: Optional["ChatState"] = None  # chat: what was sent of each part, for the continuation's deltas

    @property
    def wants_ids(self) -> bool:
        return bool(self.body.get("return_token_ids"))

    @property
    def wants_usage(self) -> bool:
        return bool((self.body.get("stream_options") or {}).get("include_usage"))

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def remaining(self) -> Optional[int]:
        """The budget left: the request's (max_completion_tokens, max_tokens, or the completions
        default) less what was generated; None where the request set none (chat)."""
        want = self.body.get("max_completion_tokens") or self.body.get("max_tokens")
        if want is None and self.path == COMPLETIONS:
            want = COMPLETIONS_DEFAULT_MAX_TOKENS
        return None if want is None else max(0, int(want) - len(self.generated))

    def usage(self) -> Dict[str, int]:
        prompt = self.prompt_tokens if self.prompt_tokens is not None else len(self.prompt_ids or ())
        return {"prompt_tokens": prompt, "completion_tokens": len(self.generated),
                "total_tokens": prompt + len(self.generated)}


def continuation(progress: Progress) -> Dict[str, Any]:
    """The request that asks another engine for the rest of the answer: `/v1/completions` with the
    prompt's ids and the ids generated so far, the remaining budget and the same sampling."""
    body = progress.body
    out: Dict[str, Any] = {"model": body.get("model"), "prompt": [*(progress.prompt_ids or ()), *progress.generated],
                           "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True}
    for name in SAMPLING:
        if name in body:
            out[name] = body[name]
    if progress.path == CHAT:
        # the chat endpoint's defaults where the chat request left them (vLLM's ChatCompletionRequest):
        # the parsers need the special tokens (the reasoning and tool-call markers) in the text
        out.setdefault("skip_special_tokens", body.get("skip_special_tokens", True))
    remaining = progress.remaining()
    if remaining is not None:
        out["max_tokens"] = remaining
    if body.get("min_tokens"):
        out["min_tokens"] = max(0, int(body["min_tokens"]) - len(progress.generated))
    return out


# ---------------------------------------------------------------- SSE


class Events:
    """SSE lines -> the `data:` payloads, one per blank-line-ended block (comments and other fields
    skipped): `line` gives the payload a line completes, `end` the one left open at the body's end.
    The one SSE reader of the front, for a list of lines (`events`) and for a body as it comes."""

    def __init__(self) -> None:
        self.data: List[str] = []

    def line(self, raw: bytes) -> Optional[str]:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if text.startswith("data:"):
            self.data.append(text[5:].lstrip(" "))
        elif not text and self.data:
            return self.end()
        return None

    def end(self) -> Optional[str]:
        payload, self.data = ("\n".join(self.data) if self.data else None), []
        return payload


def events(lines: Iterable[bytes]) -> Iterator[str]:
    """The `data:` payloads of SSE lines (`Events`)."""
    reader = Events()
    for raw in lines:
        payload = reader.line(raw)
        if payload is not None:
            yield payload
    payload = reader.end()
    if payload is not None:
        yield payload


def sse(payload: Any) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return b"data: " + text.encode() + b"\n\n"


def error_event(message: str, code: int = 502, kind: str = "stream_interrupted") -> bytes:
    """The event that ends a stream that cannot complete: OpenAI's SDKs raise an APIError on an event
    whose object holds `error` (openai-python `_streaming.py`)."""
    return sse({"error": {"message": message, "type": kind, "param": None, "code": code}})


# ---------------------------------------------------------------- chunks


def take(progress: Progress, chunk: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Record what a chunk of the stream's own engine carries (its token ids, finish, usage) and give
    the chunk the client sees: the stream's first id and time, without the ids it did not ask for,
    without the usage (the front sends the whole answer's at the end). None: nothing to send."""
    if progress.first_id is None:
        progress.first_id, progress.created = chunk.get("id"), chunk.get("created")
    if chunk.get("prompt_token_ids") is not None and progress.prompt_ids is None:
        progress.prompt_ids = list(chunk["prompt_token_ids"])
    usage = chunk.get("usage")
    if isinstance(usage, dict) and usage.get("prompt_tokens") is not None and progress.attempts == 0:
        progress.prompt_tokens = usage["prompt_tokens"]
    choices = chunk.get("choices") or []
    for choice in choices:
        if choice.get("prompt_token_ids") is not None and progress.prompt_ids is None:  # completions: per choice
            progress.prompt_ids = list(choice["prompt_token_ids"])
        ids = choice.get("token_ids")
        if ids:
            progress.generated.extend(ids)
        if choice.get("finish_reason") is not None:
            progress.finish_reason = choice["finish_reason"]
            progress.stop_reason = choice.get("stop_reason")
        if progress.path == CHAT and (choice.get("delta") or {}).get("role"):
            progress.role_sent = True
        if progress.chat is not None:
            progress.chat.sent_delta(choice.get("delta") or {})
    if not choices:
        return None  # the usage chunk: the front sends its own
    return _shown(progress, chunk)


def _shown(progress: Progress, chunk: Dict[str, Any]) -> Dict[str, Any]:
    """The chunk under the stream's id and time, without the usage, and without the token ids the
    client did not ask for (nor, after the seam, the continuation's prompt: the client's came first)."""
    out = dict(chunk)
    out["id"], out["created"] = progress.first_id, progress.created
    out.pop("usage", None)
    drop = {"prompt_token_ids"} if progress.attempts or not progress.wants_ids else set()
    if not progress.wants_ids:
        drop.add("token_ids")
    for key in drop:
        out.pop(key, None)
    out["choices"] = [{k: v for k, v in c.items() if k not in drop} for c in out["choices"]]
    return out


def record(progress: Progress, chunk: Dict[str, Any]) -> bool:
    """Record a chunk of the continuation (the survivor's): its token ids and finish; whether it
    carried a choice (the usage chunk does not)."""
    choices = chunk.get("choices") or []
    for choice in choices:
        progress.generated.extend(choice.get("token_ids") or ())
        if choice.get("finish_reason") is not None:
            progress.finish_reason = choice["finish_reason"]
            progress.stop_reason = choice.get("stop_reason")
    return bool(choices)


def continued(progress: Progress, chunk: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A completions chunk of the continuation, for a completions stream: recorded, and shown under
    the stream's id. (A chat stream's rest goes through `ChatState`.)"""
    if not record(progress, chunk):
        return None
    out = _shown(progress, chunk)
    out["choices"] = [{**c, "index": 0} for c in out["choices"]]
    return out


def usage_chunk(progress: Progress) -> Dict[str, Any]:
    obj = "chat.completion.chunk" if progress.path == CHAT else "text_completion"
    return {"id": progress.first_id, "object": obj, "created": progress.created, "model": progress.body.get("model"),
            "choices": [], "usage": progress.usage()}


# ---------------------------------------------------------------- chat across the seam


@dataclass
class ChatState:
    """What a chat stream has sent of each part of the message (reasoning, content, each tool call's
    name and arguments), so that after the seam the front sends exactly the rest: the survivor's
    tokens are turned back into the message by the engines' own parsers (vLLM's derender endpoint,
    which runs the recipe's reasoning and tool-call parsers over the whole answer so far), and the
    delta is what that message holds beyond what was sent."""

    reasoning: str = ""
    content: str = ""
    reasoning_key: str = "reasoning"  # vLLM 0.32's delta field (older releases: reasoning_content)
    tools: List[Dict[str, str]] = field(default_factory=list)  # [{"id", "name", "arguments"}]

    def sent_delta(self, delta: Dict[str, Any]) -> None:
        if delta.get("reasoning_content"):
            self.reasoning_key = "reasoning_content"
        self.reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
        self.content += delta.get("content") or ""
        for call in delta.get("tool_calls") or ():
            index = int(call.get("index", 0))
            while len(self.tools) <= index:
                self.tools.append({"id": "", "name": "", "arguments": ""})
            found = self.tools[index]
            if call.get("id"):
                found["id"] = call["id"]
            function = call.get("function") or {}
            found["name"] += function.get("name") or ""
            found["arguments"] += function.get("arguments") or ""

    def delta_to(self, message: Dict[str, Any], final: bool) -> Optional[Dict[str, Any]]:
        """The delta from what was sent to `message` (a whole message as the parsers read the answer
        so far); None while the message does not extend what was sent (the parsers hold a part back
        until more tokens come: e.g. a tool call not yet closed), unless `final`."""
        reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
        content = message.get("content") or ""
        tools = [{"id": c.get("id") or "", "name": (c.get("function") or {}).get("name") or "",
                  "arguments": (c.get("function") or {}).get("arguments") or ""}
                 for c in message.get("tool_calls") or ()]
        extends = (reasoning.startswith(self.reasoning) and content.startswith(self.content)
                   and len(tools) >= len(self.tools)
                   and all(t["arguments"].startswith(s["arguments"]) and (not s["name"] or t["name"] == s["name"])
                           for t, s in zip(tools, self.tools)))
        if not extends and not final:
            return None
        delta: Dict[str, Any] = {}
        if reasoning.startswith(self.reasoning) and len(reasoning) > len(self.reasoning):
            delta[self.reasoning_key] = reasoning[len(self.reasoning):]
        if content.startswith(self.content) and len(content) > len(self.content):
            delta["content"] = content[len(self.content):]
        calls = []
        for index, tool in enumerate(tools):
            sent = self.tools[index] if index < len(self.tools) else None
            call: Dict[str, Any] = {"index": index}
            function: Dict[str, str] = {}
            if sent is None:
                call.update(id=tool["id"], type="function")
                function = {"name": tool["name"], "arguments": tool["arguments"]}
            elif tool["arguments"].startswith(sent["arguments"]) and len(tool["arguments"]) > len(sent["arguments"]):
                function = {"arguments": tool["arguments"][len(sent["arguments"]):]}
            if function:
                call["function"] = function
                calls.append(call)
        if calls:
            delta["tool_calls"] = calls
        if not delta:
            return {} if final else None
        self.sent_delta(delta)
        return delta


def chat_chunk(progress: Progress, delta: Dict[str, Any], finish: Optional[str] = None,
               ids: Optional[List[int]] = None) -> Dict[str, Any]:
    choice: Dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None and progress.stop_reason is not None:
        choice["stop_reason"] = progress.stop_reason
    if progress.wants_ids and ids is not None:
        choice["token_ids"] = ids
    return {"id": progress.first_id, "object": "chat.completion.chunk", "created": progress.created,
            "model": progress.body.get("model"), "choices": [choice]}


def derender_body(progress: Progress) -> Dict[str, Any]:
    """The derender request: the client's chat request (its tools, its parser options) and every
    token generated so far, as one finished choice."""
    request = {k: v for k, v in progress.body.items() if k not in ("stream", "stream_options")}
    return {"request": request, "token_ids": list(progress.generated)}
