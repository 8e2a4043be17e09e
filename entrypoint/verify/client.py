"""Talking to the server under test: JSON over HTTP, each exchange inside the running check's
deadline (a total for the whole check, not a bound per read) and under a size cap. Every way a
server can fail (refused, hung, slow drip, too large, not JSON, an HTTP error) becomes CheckFailed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from entrypoint.core.base.bounded import ConnectionRefused, HttpError, Late, request

MAX_ANSWER_BYTES = 8 * 1024 * 1024  # a chat completion or a 4k-token stream is well under 1 MiB
NOT_READY = "not ready: the server is not running or still starting (vLLM opens its port once the model is loaded)"


class CheckFailed(Exception):
    """The server did not answer the way users need; the message says how and what to do."""


class ServerError(CheckFailed):
    """The server answered with an HTTP error status; `message` is its own explanation."""

    def __init__(self, what: str, status: int, message: str):
        super().__init__(f"{what}: HTTP {status}: {excerpt(message, 200)}")
        self.status = status
        self.message = message


def excerpt(value: object, limit: int = 120) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def normalize_url(url: str) -> str:
    """The server root, also when given as the OpenAI base URL (.../v1)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def error_message(body: bytes) -> str:
    """The explanation in an error answer: vLLM's {"error": {"message": ...}}, else the text."""
    try:
        value = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()
    error = value.get("error", value) if isinstance(value, dict) else value
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)
    return str(error)


class Server:
    """The server under test. `begin(seconds)` starts a check's clock; every exchange until the
    next `begin` must finish before it runs out."""

    def __init__(self, url: str, max_bytes: int = MAX_ANSWER_BYTES):
        self.url = url
        self.max_bytes = max_bytes
        self.tokens: int | None = None  # completion tokens the running check used
        self._seconds = 0.0
        self._end = 0.0

    def begin(self, seconds: float) -> None:
        self._seconds, self._end = seconds, time.monotonic() + seconds
        self.tokens = None

    def close(self) -> None:
        pass  # one connection per exchange, closed with it

    def get(self, path: str) -> bytes:
        return self._ok(path, *self._exchange("GET", path, None))

    def get_json(self, path: str) -> object:
        return _json(self.get(path), path)

    def chat(self, body: dict) -> dict:
        what = "chat completion"
        answer = _json(self._ok(what, *self._exchange("POST", "/v1/chat/completions", body)), what)
        if not isinstance(answer, dict):
            raise CheckFailed(f"{what} is not a JSON object: {excerpt(answer)}")
        self._count(answer.get("usage"))
        return answer

    def stream_chat(self, body: dict) -> list[dict]:
        """POST a streaming chat completion; its server-sent events up to `data: [DONE]`."""
        what = "streaming chat completion"
        payload = self._ok(what, *self._exchange("POST", "/v1/chat/completions", body, until=b"data: [DONE]"))
        events = []
        for line in payload.decode("utf-8", "replace").splitlines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                break
            events.append(_event(data))
        for event in events:
            self._count(event.get("usage"))
        return events

    # -- the exchange -----------------------------------------------------------------------

    def _exchange(self, method: str, path: str, body: dict | None, until: bytes | None = None):
        """(status, body bytes), all of it read before the check's deadline (entrypoint.core.base.bounded:
        one total deadline, not a bound per read, so a server that drips one byte at a time ends too)."""
        remaining = self._end - time.monotonic()
        if remaining <= 0:
            raise CheckFailed(f"{path}: {self._late()}")
        try:
            response = request(method, self.url + path, json_body=body, timeout=remaining, max_bytes=self.max_bytes,
                               until=until)
        except Late:
            raise CheckFailed(f"{path}: {self._late()}") from None
        except ConnectionRefused as error:
            raise CheckFailed(f"{path}: {error}: {NOT_READY}") from None
        except HttpError as error:
            raise CheckFailed(f"{path}: {error}") from None
        self.last_gap_s = response.longest_gap_s  # a stream's longest silence (streaming check)
        return response.status_code, response.content

    def _late(self) -> str:
        return (f"no complete answer within the check's {self._seconds:g} s "
                "(the server hangs, is overloaded or generates slowly; --timeout sets the time per check)")

    @staticmethod
    def _ok(what: str, status: int, body: bytes) -> bytes:
        if status != 200:
            raise ServerError(what, status, error_message(body))
        return body

    def _count(self, usage: object) -> None:
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(tokens, int):
            self.tokens = (self.tokens or 0) + tokens


def _json(body: bytes, what: str) -> object:
    try:
        return json.loads(body)
    except ValueError:
        raise CheckFailed(f"{what}: the answer is not JSON: {excerpt(body.decode('utf-8', 'replace'))}") from None


def _event(data: str) -> dict:
    try:
        event = json.loads(data)
    except ValueError:
        raise CheckFailed(f"the stream sent an event that is not JSON: {excerpt(data)}") from None
    if not isinstance(event, dict):
        raise CheckFailed(f"the stream sent an event that is not a JSON object: {excerpt(event)}")
    if "error" in event:
        raise CheckFailed(f"the stream sent an error: {excerpt(event['error'])}")
    return event


@dataclass(frozen=True)
class Reply:
    """choices[0] of a chat completion, in vLLM's shape: `content` null when there is only
    reasoning or a tool call, `reasoning` (never reasoning_content, which vLLM dropped), `tool_calls`
    absent when there are none."""

    message: dict
    finish_reason: str | None

    @classmethod
    def parse(cls, answer: dict) -> Reply:
        choices = answer.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise CheckFailed(f"the chat completion has no choices[0].message: {excerpt(answer)}")
        return cls(message, choice.get("finish_reason"))

    @property
    def content(self) -> str:
        return self.message.get("content") or ""

    @property
    def reasoning(self) -> str:
        return self.message.get("reasoning") or ""

    @property
    def tool_calls(self) -> list:
        calls = self.message.get("tool_calls")
        return calls if isinstance(calls, list) else []
