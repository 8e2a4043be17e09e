"""A stand-in for vLLM's OpenAI-compatible server: scripted answers in vLLM's shapes.

Runs http.server in a thread on 127.0.0.1 (ephemeral port). `mode` picks how it behaves:
  ok                 healthy vLLM with kimi_k2 reasoning and tool-call parsers
  reasoning_field    healthy, but names the reasoning field `reasoning` (newer vLLM)
  think_in_content   no reasoning parser: <think>...</think> left inside content
  always_thinks      instant mode ("thinking": false) still returns reasoning
  tool_as_text       no tool-call parser: the tool call comes back as text in content
  path_model         started without --served-model-name: the model id is a filesystem path
  stream_no_finish   the stream never sends a finish_reason
  hang               every request sleeps longer than any client timeout in the tests
  garbage            /v1/* answers with invalid JSON (and invalid stream events)
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SERVED_NAME = "kimi-k2.5"
MODEL_PATH = "/root/autodl-fs/moonshotai/Kimi-K2.5"
REASONING = "The user asks for a sum. 17 plus 25 is 42."
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOOL_CALLS = {  # prompt keyword -> (function, JSON-string arguments), as kimi_k2's parser returns them
    "strawberry": ("count_letter_in_string", json.dumps({"a": "strawberry", "b": "r"})),
    "9.11": ("compare", json.dumps({"a": 9.11, "b": 9.9})),
}


class StandinServer:
    def __init__(self, mode: str = "ok", hang_s: float = 10.0):
        self.mode = mode
        self.hang_s = hang_s
        self.model_id = MODEL_PATH if mode == "path_model" else SERVED_NAME
        self.requests: list[tuple[str, dict | None]] = []  # (path, JSON body) in arrival order
        self.release = threading.Event()  # ends a hanging request early, at shutdown
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.standin = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address
        return f"http://{host}:{port}"

    def __enter__(self) -> StandinServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def chat_bodies(self) -> list[dict]:
        return [body for path, body in self.requests if path == "/v1/chat/completions"]


def _answer(standin: StandinServer, body: dict) -> tuple[dict, str]:
    """The assistant message and finish_reason for a chat request."""
    messages = body["messages"]
    last = messages[-1]
    thinking = body.get("chat_template_kwargs", {}).get("thinking", True)
    if last["role"] == "tool":
        called = {c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []}
        if last.get("tool_call_id") not in called:
            raise ValueError("the tool message answers no tool call of this conversation")
        return _message(standin, f"The tool says: {last['content']}", thinking), "stop"
    prompt = last["content"]
    if isinstance(prompt, list):
        return _message(standin, _describe_image(prompt), thinking), "stop"
    for keyword, (name, arguments) in TOOL_CALLS.items():
        if body.get("tools") and keyword in prompt:
            if standin.mode == "tool_as_text":
                text = f"<|tool_calls_section_begin|>functions.{name}:0 {arguments}<|tool_calls_section_end|>"
                return _message(standin, text, thinking), "stop"
            message = _message(standin, None, thinking)
            message["tool_calls"] = [
                {"id": f"functions.{name}:0", "type": "function", "function": {"name": name, "arguments": arguments}}
            ]
            return message, "tool_calls"
    return _message(standin, "42", thinking), "stop"


def _message(standin: StandinServer, content: str | None, thinking: bool) -> dict:
    reasons = thinking or standin.mode == "always_thinks"
    if reasons and standin.mode == "think_in_content":
        return {"role": "assistant", "content": f"<think>{REASONING}</think>{content or ''}", "tool_calls": []}
    field = "reasoning" if standin.mode == "reasoning_field" else "reasoning_content"
    return {"role": "assistant", "content": content, field: REASONING if reasons else None, "tool_calls": []}


def _describe_image(parts: list) -> str:
    url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
    match = re.fullmatch(r"data:image/png;base64,(.+)", url)
    if not match or not base64.b64decode(match.group(1)).startswith(PNG_SIGNATURE):
        raise ValueError("the image is not a PNG data URL")
    return "Red."


def _usage(message: dict) -> dict:
    text = " ".join(str(message.get(k) or "") for k in ("content", "reasoning_content", "reasoning"))
    completion = len(text.split()) + 10 * len(message.get("tool_calls") or [])
    return {"prompt_tokens": 12, "completion_tokens": completion, "total_tokens": 12 + completion}


def _completion(standin: StandinServer, message: dict, finish_reason: str) -> dict:
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "model": standin.model_id,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": _usage(message),
    }


def _stream_events(standin: StandinServer, message: dict, finish_reason: str) -> list[dict]:
    def chunk(delta: dict, finish: str | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "choices": [choice]}

    events = [chunk({"role": "assistant", "content": ""})]
    for field in ("reasoning_content", "reasoning"):
        events += [chunk({field: word + " "}) for word in (message.get(field) or "").split()]
    events += [chunk({"content": word}) for word in re.findall(r"\S+\s*", message.get("content") or "")]
    if standin.mode != "stream_no_finish":
        events.append(chunk({}, finish_reason))
    usage = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "choices": [], "usage": _usage(message)}
    return events + [usage]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *_args) -> None:  # keep test output quiet
        pass

    @property
    def standin(self) -> StandinServer:
        return self.server.standin

    def do_GET(self) -> None:
        self.standin.requests.append((self.path, None))
        if self._hangs():
            return
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/v1/models" and self.standin.mode == "garbage":
            self._send(200, b'{"object": "list", "data": [')
        elif self.path == "/v1/models":
            model = {"id": self.standin.model_id, "object": "model", "owned_by": "vllm", "root": MODEL_PATH}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.standin.requests.append((self.path, body))
        if self._hangs():
            return
        if self.path != "/v1/chat/completions":
            return self._send_json(404, {"detail": "Not Found"})
        if self.standin.mode == "garbage" and body.get("stream"):
            return self._send(200, b'data: {"id": "chatcmpl-1", "choices": [\n\n', "text/event-stream")
        if self.standin.mode == "garbage":
            return self._send(200, b'{"id": "chatcmpl-1", "choices": [')
        if body.get("model") != self.standin.model_id:
            message = f"The model `{body.get('model')}` does not exist."
            return self._send_json(404, {"object": "error", "message": message, "type": "NotFoundError", "code": 404})
        try:
            message, finish_reason = _answer(self.standin, body)
        except (KeyError, ValueError) as error:
            return self._send_json(400, {"object": "error", "message": str(error), "type": "BadRequestError"})
        if body.get("stream"):
            return self._send_stream(_stream_events(self.standin, message, finish_reason))
        self._send_json(200, _completion(self.standin, message, finish_reason))

    def _hangs(self) -> bool:
        if self.standin.mode != "hang":
            return False
        self.standin.release.wait(self.standin.hang_s)
        return True

    def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send_json(self, status: int, value: object) -> None:
        self._send(status, json.dumps(value).encode())

    def _send_stream(self, events: list[dict]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
