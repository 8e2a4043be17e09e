"""A stand-in for vLLM 0.32.0's OpenAI-compatible server: scripted answers in its shapes.

The shapes are those a real vLLM 0.32.0 gave (tests/data/vllm-0.32.0/responses.json; the test
test_standin_shapes.py holds this server to them): the reasoning field is `reasoning` (never
reasoning_content), `content` is null when there is only reasoning or a tool call, `tool_calls`
is absent when there are none, errors are {"error": {"message", "type", "param", "code"}},
/health is 200 with an empty body, a wrong model is a 404 that lists the valid aliases, max_tokens
above the context is a 400, and so are tools without a tool parser and images on a text-only
model. (A real server keeps its port closed until it is ready: tests use a closed port for that.)

Runs http.server in a thread on 127.0.0.1 (ephemeral port). `mode` picks the server:
  ok                 --served-model-name, both kimi_k2 parsers, a multimodal model
  text_only          as ok, but the model has no vision encoder (images: 400)
  plain              a plain chat model (Kimi-Linear's kind): no parser at all, no vision encoder
                     (images: 400), a chat template without thinking (it never thinks)
  small_context      as ok, with --max-model-len 2048
  no_parsers         no --reasoning-parser and no --tool-call-parser
  wrong_tool_parser  a tool-call parser other than kimi_k2: the Kimi tool call stays in content
  always_thinks      a chat template that ignores "thinking": false
  random             random weights with both parsers: a </think> splits gibberish at random
  random_tool_call   random weights whose gibberish the kimi_k2 parser reads as a call of a function
                     never offered (its name gibberish with a special token: seen from the real
                     random model on vLLM 0.32.0 in ci18, 2026-12-06)
  path_model         no --served-model-name: the model id is the filesystem path
  stream_no_finish   the stream never sends a finish_reason
  hang               every request sleeps longer than any client timeout in the tests
  drip               answers arrive one byte at a time, each well within a read timeout
  silent_stream      a stream that sends nothing for 1.2 s after its first event, as a Kimi-K3 tool
                     call's arguments are held back (vllm-project/vllm#50604: ~32 s), then the rest
  huge               answers never end
  garbage            /v1/* answers with invalid JSON (and invalid stream events)
  overlap_tool_deltas  as ok, but a tool-call stream that overlaps another gets empty tool-call
                     deltas (id and name kept, no argument text): the symptom of
                     vllm-project/vllm#54701 (kimi_k2 parser, 6-14 concurrent streams), in vLLM
                     0.32.0's stream shape; single requests stay correct
  overlap_repeats    as ok, but a stream that overlaps another says "!" over and over
                     (vllm-project/vllm#42426); single requests stay correct

Streamed tool calls come as vLLM 0.32.0's kimi_k2 parser sends them (test_real_vllm.py holds the
shape to a live server): one delta with id, type, index, name and the arguments but their last
character, then one delta with that character.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SILENCE_S = 1.2  # silent_stream: the pause after the first event
VLLM_VERSION = "0.32.0"
SERVED_NAME = "kimi-k2.5"
MODEL_PATH = "/root/autodl-fs/moonshotai/Kimi-K2.5"
REASONING = "The user asks for a sum. 17 plus 25 is 42."
GIBBERISH = ("0 thread expectsYouve(nt blue 42 wave", "ulations 9 mor the 3 relay")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOOL_CALLS = {  # prompt keyword -> (function, JSON-string arguments), as kimi_k2's parser returns them
    "strawberry": ("count_letter_in_string", json.dumps({"a": "strawberry", "b": "r"})),
    "9.11": ("compare", json.dumps({"a": 9.11, "b": 9.9})),
}
FINAL_ANSWERS = {"appears 3 times": "There are 3 r's in strawberry.", "9.9 is greater": "9.9 is larger than 9.11."}


MODES = ("ok", "silent_stream", "text_only", "plain", "small_context", "no_parsers", "wrong_tool_parser", "always_thinks", "random",
         "random_tool_call", "path_model", "stream_no_finish", "hang", "drip", "huge", "garbage", "overlap_tool_deltas", "overlap_repeats")
OVERLAP_MODES = ("overlap_tool_deltas", "overlap_repeats")
OVERLAP_HOLD_S = 0.5  # an overlap mode holds each stream open this long, so concurrent ones overlap


class StandinServer:
    def __init__(self, mode: str = "ok", hang_s: float = 10.0):
        assert mode in MODES, mode
        self.mode = mode
        self.hang_s = hang_s
        self.model_id = MODEL_PATH if mode == "path_model" else SERVED_NAME
        self.max_model_len = 2048 if mode == "small_context" else 262144
        self.requests: list[tuple[str, dict | None]] = []  # (path, JSON body) in arrival order
        self.release = threading.Event()  # ends a hanging request early, at shutdown
        self.lock = threading.Lock()
        self.open_streams: set[int] = set()  # overlap modes: the streams being served now
        self.overlapped: set[int] = set()  # ... and those that have shared time with another
        self.overlaps = 0  # streams served while another was open
        self.corrupted = 0  # tool-call streams sent with empty deltas (overlap_tool_deltas)
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


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400, kind: str = "BadRequestError"):
        super().__init__(message)
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
        self.status = status


def _text(content: object) -> str:
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content or ""


def _validate(standin: StandinServer, body: dict) -> None:
    if body.get("model") != standin.model_id:
        raise BadRequest(f"The model `{body.get('model')}` does not exist. Valid aliases: {standin.model_id}.",
                         "model", 404, "NotFoundError")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens > standin.max_model_len:
        raise BadRequest(f"max_tokens={max_tokens} cannot be greater than max_model_len={standin.max_model_len}. "
                         f"Please request fewer output tokens. (parameter=max_tokens, value={max_tokens})",
                         "max_tokens")
    if body.get("tools") and body.get("tool_choice", "auto") == "auto" and standin.mode in ("no_parsers", "plain"):
        raise BadRequest('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
    if isinstance(body["messages"][-1]["content"], list) and standin.mode in ("text_only", "plain"):
        raise BadRequest(f"{standin.model_id} is not a multimodal model")


def _output(standin: StandinServer, body: dict) -> tuple[str, list | None]:
    """What the model says (reasoning markup and all) and its tool call, before any parser."""
    messages = body["messages"]
    last = messages[-1]
    thinking = body.get("chat_template_kwargs", {}).get("thinking", True) or standin.mode == "always_thinks"
    thinking = thinking and standin.mode != "plain"  # its template has no thinking
    think = f"<think>{REASONING}</think>" if thinking else ""
    if standin.mode == "random":
        return (f"{GIBBERISH[0]}</think>{GIBBERISH[1]}" if thinking else GIBBERISH[1]), None
    if standin.mode == "random_tool_call" and body.get("tools"):
        name = "\x05\ufffd\x05<|route_unknown_think|>\ufffd"
        return think, [{"id": "chatcmpl-tool-94bfad590cfc2d7d", "type": "function",
                        "function": {"name": name, "arguments": "{}"}}]
    if last["role"] == "tool":
        called = {c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []}
        if last.get("tool_call_id") not in called:
            raise BadRequest("the tool message answers no tool call of this conversation")
        answer = next((a for key, a in FINAL_ANSWERS.items() if key in last["content"]), "I do not know.")
        return think + answer, None
    if isinstance(last["content"], list):
        url = next(p["image_url"]["url"] for p in last["content"] if p["type"] == "image_url")
        match = re.fullmatch(r"data:image/png;base64,(.+)", url)
        if not match or not base64.b64decode(match.group(1)).startswith(PNG_SIGNATURE):
            raise BadRequest("the image is not a PNG data URL")
        return think + "Red.", None
    for keyword, (name, arguments) in TOOL_CALLS.items():
        if body.get("tools") and keyword in last["content"]:
            call = {"id": f"functions.{name}:0", "type": "function", "function": {"name": name, "arguments": arguments}}
            return think, [call]
    return think + "42", None


def _parsed(standin: StandinServer, body: dict) -> tuple[dict, str]:
    """The assistant message as vLLM returns it after its parsers, and the finish_reason."""
    text, calls = _output(standin, body)
    thinking = body.get("chat_template_kwargs", {}).get("thinking", True)
    if calls and standin.mode in ("wrong_tool_parser", "no_parsers"):
        (call,) = calls
        text += (f"<|tool_calls_section_begin|><|tool_call_begin|>{call['id']}<|tool_call_argument_begin|>"
                 f"{call['function']['arguments']}<|tool_call_end|><|tool_calls_section_end|>")
        calls = None
    reasoning = None
    if thinking and standin.mode not in ("no_parsers", "plain"):  # kimi_k2: all is reasoning up to </think>
        reasoning, _, text = text.partition("</think>")
        reasoning = reasoning.removeprefix("<think>") or None
    message = {"role": "assistant", "content": text or None, "refusal": None, "annotations": None, "audio": None,
               "function_call": None}
    if calls:
        message["tool_calls"] = calls
    message["reasoning"] = reasoning
    return message, "tool_calls" if calls else "stop"


def _usage(standin: StandinServer, message: dict, stream: bool = False) -> dict:
    text = " ".join(str(message.get(k) or "") for k in ("content", "reasoning"))
    completion = len(text.split()) + 10 * len(message.get("tool_calls") or [])
    usage = {"prompt_tokens": 12, "total_tokens": 12 + completion, "completion_tokens": completion}
    if not stream:
        usage["prompt_tokens_details"] = None
    # counted by the reasoning parser, so null without one
    usage["completion_tokens_details"] = None if standin.mode in ("no_parsers", "plain") else {"reasoning_tokens": 1}
    return usage


def _completion(standin: StandinServer, message: dict, finish_reason: str) -> dict:
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason,
              "stop_reason": None, "token_ids": None, "routed_experts": None}
    return {
        "id": "chatcmpl-standin", "object": "chat.completion", "created": int(time.time()), "model": standin.model_id,
        "choices": [choice], "service_tier": None, "system_fingerprint": f"vllm-{VLLM_VERSION}-standin",
        "usage": _usage(standin, message), "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None,
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    }


def _stream_events(standin: StandinServer, message: dict, finish_reason: str, overlapped: bool = False) -> list[dict]:
    def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}
        return {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": standin.model_id, "choices": [choice]}

    events = [{**chunk({"role": "assistant", "content": ""}), "prompt_token_ids": None, "prompt_text": None}]
    if message.get("reasoning"):
        events.append(chunk({"reasoning": message["reasoning"]}, token_ids=None))
    events += [chunk({"content": word}, token_ids=None) for word in re.findall(r"\S+\s*", message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        corrupt = overlapped and standin.mode == "overlap_tool_deltas"
        standin.corrupted += corrupt
        arguments = "" if corrupt else call["function"]["arguments"]
        first = {"id": call["id"], "type": "function", "index": index,
                 "function": {"name": call["function"]["name"], "arguments": arguments[:-1]}}
        events.append(chunk({"tool_calls": [first]}, token_ids=None))
        events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[-1:]}}]},
                            token_ids=None))
    if standin.mode != "stream_no_finish":
        events.append(chunk({}, finish_reason, stop_reason=None, token_ids=None))
    usage = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()),
             "model": standin.model_id, "choices": [], "usage": _usage(standin, message, stream=True),
             "system_fingerprint": f"vllm-{VLLM_VERSION}-standin"}
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
            model = {"id": self.standin.model_id, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                     "root": MODEL_PATH, "parent": None, "max_model_len": self.standin.max_model_len, "permission": []}
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
        try:
            _validate(self.standin, body)
            message, finish_reason = _parsed(self.standin, body)
        except BadRequest as error:
            return self._send_json(error.status, error.body)
        if body.get("stream"):
            with self._open_stream() as overlapped:
                if overlapped and self.standin.mode == "overlap_repeats":
                    message = {**message, "content": "!" * 64, "reasoning": message["reasoning"] and "!" * 64}
                return self._send_stream(_stream_events(self.standin, message, finish_reason, overlapped))
        self._send_json(200, _completion(self.standin, message, finish_reason))

    @contextmanager
    def _open_stream(self):
        """Overlap modes: hold the stream open a while; yields whether another was open meanwhile."""
        standin = self.standin
        if standin.mode not in OVERLAP_MODES:
            yield False
            return
        me = id(self)
        with standin.lock:
            if standin.open_streams:
                standin.overlapped |= standin.open_streams | {me}
            standin.open_streams.add(me)
        try:
            standin.release.wait(OVERLAP_HOLD_S)
            with standin.lock:
                overlapped = me in standin.overlapped
                standin.overlaps += overlapped
            yield overlapped
        finally:
            with standin.lock:
                standin.open_streams.discard(me)
                standin.overlapped.discard(me)

    def _hangs(self) -> bool:
        if self.standin.mode != "hang":
            return False
        self.standin.release.wait(self.standin.hang_s)
        return True

    def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if self.standin.mode == "huge":
            self.end_headers()
            return self._endless()
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self._write(payload)

    def _send_json(self, status: int, value: object) -> None:
        self._send(status, json.dumps(value).encode())

    def _send_stream(self, events: list[dict]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.standin.mode == "huge":
            return self._endless()
        chunks = [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]
        if self.standin.mode == "silent_stream":
            self.wfile.write(chunks[0])
            self.wfile.flush()
            self.standin.release.wait(SILENCE_S)
            chunks = chunks[1:]
        self._write(b"".join(chunks))

    def _write(self, payload: bytes) -> None:
        if self.standin.mode != "drip":
            return self.wfile.write(payload)
        for i in range(len(payload)):  # one byte per 0.05 s: every read is quick, the whole is slow
            if self.standin.release.wait(0.05):
                return
            self.wfile.write(payload[i:i + 1])
            self.wfile.flush()

    def _endless(self) -> None:
        block = b"x" * 65536
        try:
            while not self.standin.release.is_set():
                self.wfile.write(block)
        except OSError:
            pass
