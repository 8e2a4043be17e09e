"""The stream front (entrypoint/front, issue 48) against a stand-in upstream: an aiohttp server that
answers as vLLM 0.32.0 behind vllm-router 0.1.17 does (its SSE chunks with `return_token_ids`: the
prompt's ids in the first chunk, each chunk's new ids; the derender endpoint's ChatCompletionResponse;
a stream cut by a dead engine: the router's response ends mid-body), checked from chunk shapes read in
vllm 0.32.0's entrypoints/openai/{completion,chat_completion}/serving.py and
entrypoints/scale_out/derender. The live fleet (tests/live/test_fleet.py) runs the real ones.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import List

import pytest

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

from entrypoint.front import stream as S  # noqa: E402
from entrypoint.front.server import Front  # noqa: E402

PROMPT_IDS = [11, 12, 13]
ANSWER = list(range(100, 120))  # the stand-in engine's greedy answer: token id = 100 + position


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Upstream:
    """vllm-router + engines, stood in: each streamed request is served from the prompt's position in
    ANSWER; `cut_after` tokens into the first stream the engine dies (the body ends mid-chunked)."""

    def __init__(self, cut_after=None, cut_every=False, refuse_after_cut=False, cuts=()):
        self.cut_after, self.cut_every, self.refuse_after_cut = cut_after, cut_every, refuse_after_cut
        self.cuts = list(cuts)  # or: where each streamed request in turn is cut (None: not cut)
        self.requests: List[dict] = []

    async def handle(self, request: web.Request):
        if request.path == "/health":
            return web.Response(text="ok")
        body = await request.json()
        self.requests.append({"path": request.path, "body": body})
        if request.path == "/v1/chat/completions/derender":
            ids = body["generate_response"]["choices"][0]["token_ids"]
            return web.json_response({"choices": [{"index": 0, "message": {
                "role": "assistant", "reasoning": "".join(f"r{t} " for t in ids[:5]),
                "content": "".join(f"c{t} " for t in ids[5:])}}]})
        if not body.get("stream"):
            return web.json_response({"choices": [{"text": "x"}]})
        if self.refuse_after_cut and len(self.requests) > 1:  # the router has no engine left
            return web.json_response({"error": {"message": "no healthy workers"}}, status=503)
        chat = request.path.endswith("chat/completions")
        prompt = body.get("prompt")
        start = len(prompt) - len(PROMPT_IDS) if isinstance(prompt, list) else 0
        budget = body.get("max_tokens") or 16
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        cut = self.cut_after if (len(self.requests) == 1 or self.cut_every) else None
        if self.cuts:
            cut = self.cuts.pop(0)
        for n, token in enumerate(ANSWER[start:start + budget]):
            if cut is not None and n == cut:
                request.transport.close()  # the engine died: no final chunk, no [DONE]
                return response
            last = n + 1 == budget
            choice = {"index": 0, "finish_reason": "length" if last else None,
                      "token_ids": [token] if body.get("return_token_ids") else None}
            if chat:
                choice["delta"] = ({"role": "assistant", "content": ""} if n == 0 else {}) | (
                    {"reasoning": f"r{token} "} if token < 105 else {"content": f"c{token} "})
            else:
                choice["text"] = f"t{token} "
                if n == 0 and body.get("return_token_ids"):
                    choice["prompt_token_ids"] = PROMPT_IDS if start == 0 else prompt
            chunk = {"id": f"up-{len(self.requests)}", "created": 1, "model": "m", "choices": [choice]}
            if chat and n == 0 and body.get("return_token_ids"):
                chunk["prompt_token_ids"] = PROMPT_IDS
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await asyncio.sleep(0)
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": len(prompt) if isinstance(prompt, list) else 3, "completion_tokens": budget}
            await response.write(b"data: " + json.dumps({"id": "u", "choices": [], "usage": usage}).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


@pytest.fixture
def serve():
    """Run an Upstream and a Front on loopback in a thread's loop; yields (front_url, upstream)."""
    loop = asyncio.new_event_loop()
    runners = []

    def start(upstream: Upstream, migrations: int = 3):
        up_port, front_port = _free_port(), _free_port()

        async def boot():
            app = web.Application()
            app.router.add_route("*", "/{t:.*}", upstream.handle)
            for application, port in ((app, up_port), (Front(f"http://127.0.0.1:{up_port}", migrations, 5).app(),
                                                       front_port)):
                runner = web.AppRunner(application)
                await runner.setup()
                await web.TCPSite(runner, "127.0.0.1", port).start()
                runners.append(runner)

        asyncio.run_coroutine_threadsafe(boot(), loop).result(10)
        return f"http://127.0.0.1:{front_port}"

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield start
    for runner in runners:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def _stream(url: str, path: str, body: dict):
    from tests.live.streams import send

    return send(url, path, {**body, "stream": True}, "t", timeout=30)


def test_a_stream_passes_as_one_stream_without_the_ids_it_did_not_ask_for(serve):
    url = serve(Upstream())
    seen = _stream(url, S.COMPLETIONS, {"model": "m", "prompt": "hi", "max_tokens": 8})
    assert seen.outcome == "complete" and seen.text == "".join(f"t{t} " for t in ANSWER[:8])
    assert seen.token_ids == [] and seen.usage is None and set(seen.ids) == {"up-1"}


def test_a_cut_completion_continues_from_its_token_ids_exactly(serve):
    upstream = Upstream(cut_after=5)
    url = serve(upstream)
    seen = _stream(url, S.COMPLETIONS, {"model": "m", "prompt": "hi", "max_tokens": 12, "return_token_ids": True,
                                        "stream_options": {"include_usage": True}, "temperature": 0})
    assert seen.outcome == "complete" and seen.token_ids == ANSWER[:12], seen
    assert seen.text == "".join(f"t{t} " for t in ANSWER[:12]) and set(seen.ids) == {"up-1"}
    assert seen.usage == {"prompt_tokens": 3, "completion_tokens": 12, "total_tokens": 15}
    again = upstream.requests[1]
    assert again["path"] == S.COMPLETIONS and again["body"]["prompt"] == PROMPT_IDS + ANSWER[:5]
    assert again["body"]["max_tokens"] == 7 and again["body"]["temperature"] == 0


def test_a_cut_chat_stream_gets_the_rest_of_its_message_from_the_engines_parsers(serve):
    upstream = Upstream(cut_after=3)
    url = serve(upstream)
    seen = _stream(url, S.CHAT, {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 12})
    assert seen.outcome == "complete" and seen.finish_reason == "length", seen
    assert seen.reasoning == "".join(f"r{t} " for t in ANSWER[:5])
    assert seen.text == "".join(f"c{t} " for t in ANSWER[5:12])
    assert any(r["path"] == "/v1/chat/completions/derender" for r in upstream.requests)


@pytest.mark.parametrize("extra, why", [({"n": 2}, "n > 1"), ({"logprobs": 2}, "logprobs"),
                                        ({"response_format": {"type": "json_object"}}, "structured output")])
def test_a_stream_that_cannot_be_continued_ends_with_an_error_event_naming_why(serve, extra, why):
    url = serve(Upstream(cut_after=4))
    seen = _stream(url, S.COMPLETIONS, {"model": "m", "prompt": "hi", "max_tokens": 12, **extra})
    assert seen.outcome == "error" and why in seen.error, seen


def test_a_stream_cut_more_often_than_the_limit_ends_with_an_error_event(serve):
    url = serve(Upstream(cut_after=2, cut_every=True), migrations=2)
    seen = _stream(url, S.COMPLETIONS, {"model": "m", "prompt": "hi", "max_tokens": 12})
    assert seen.outcome == "error" and "continued 2 times" in seen.error, seen


def test_a_stream_no_engine_can_continue_ends_with_an_error_event_saying_so(serve):
    url = serve(Upstream(cut_after=4, refuse_after_cut=True), migrations=2)
    seen = _stream(url, S.COMPLETIONS, {"model": "m", "prompt": "hi", "max_tokens": 12})
    assert seen.outcome == "error" and "no other engine could continue it" in seen.error, seen
    assert len(seen.text.split()) == 4  # what the engine gave before it stopped, once


@pytest.mark.parametrize("extra", [{}, {"logprobs": 2}])
def test_a_stream_cut_before_its_first_chunk_is_sent_again_whole(serve, extra):
    """ci6 (issue 51): under load a copy died while three streams waited for their first token; the
    client had seen only the headers, so the request is sent again as it was, whatever it asks
    (logprobs: a stream that could not be continued mid-answer), and the client sees one stream."""
    upstream = Upstream(cut_after=0)
    url = serve(upstream)
    body = {"model": "m", "prompt": "hi", "max_tokens": 12, "return_token_ids": True, **extra}
    seen = _stream(url, S.COMPLETIONS, body)
    assert seen.outcome == "complete" and seen.token_ids == ANSWER[:12] and set(seen.ids) == {"up-2"}, seen
    assert [r["path"] for r in upstream.requests] == [S.COMPLETIONS, S.COMPLETIONS]
    assert upstream.requests[1]["body"] == upstream.requests[0]["body"]  # the same request, not a continuation


def test_a_stream_sent_again_then_continued_counts_as_one_stream_moved_twice(serve):
    import urllib.request

    upstream = Upstream(cuts=[0, 5, None])
    url = serve(upstream)
    seen = _stream(url, S.COMPLETIONS, {"model": "m", "prompt": "hi", "max_tokens": 12, "return_token_ids": True})
    assert seen.outcome == "complete" and seen.token_ids == ANSWER[:12], seen
    assert upstream.requests[2]["body"]["prompt"] == PROMPT_IDS + ANSWER[:5]  # the continuation, after the resend
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:  # noqa: S310 - loopback
        text = answer.read().decode()
    assert "kimi_front_streams_continued_total 1\n" in text and "kimi_front_migrations_total 2\n" in text, text


def test_a_stream_no_engine_starts_ends_with_an_error_event_saying_so(serve):
    url = serve(Upstream(cut_after=0, cut_every=True), migrations=2)
    seen = _stream(url, S.CHAT, {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 12})
    assert seen.outcome == "error" and "stopped before its first token" in seen.error and "2 tries" in seen.error, seen


def test_reasons_and_continuation_bodies():
    assert S.reason(S.COMPLETIONS, {"prompt": ["a", "b"]}).startswith("a batch of prompts")
    assert S.reason(S.COMPLETIONS, {"prompt": "a", "n": 1, "logprobs": None, "echo": False}) is None
    assert S.reason(S.CHAT, {"messages": [], "logprobs": False, "response_format": {"type": "text"}}) is None
    assert "forced tool call" in S.reason(S.CHAT, {"messages": [], "tool_choice": {"type": "function"}})
    progress = S.Progress(path=S.CHAT, body={"model": "m", "max_completion_tokens": 10, "seed": 7}, continuable=None,
                          prompt_ids=[1, 2], generated=[3, 4, 5])
    body = S.continuation(progress)
    assert body["prompt"] == [1, 2, 3, 4, 5] and body["max_tokens"] == 7 and body["seed"] == 7
    assert list(S.events([b"data: {}\n", b"\n", b": comment\n", b"data: [DONE]\n", b"\n"])) == ["{}", "[DONE]"]


def test_a_chat_delta_waits_while_the_parsers_hold_a_part_back():
    state = S.ChatState()
    state.sent_delta({"reasoning": "think ", "tool_calls": [{"index": 0, "id": "c1", "function": {
        "name": "f", "arguments": '{"a":'}}]})
    held = {"reasoning": "think ", "content": "", "tool_calls": []}  # the call not yet closed: not parsed yet
    assert state.delta_to(held, final=False) is None
    whole = {"reasoning": "think ", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    assert state.delta_to(whole, final=True) == {"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}
