"""The stream front's HTTP server (aiohttp): every request passes through to the router untouched but
the streamed completions and chat completions, which it relays chunk by chunk, keeping the token ids,
and which, when their engine dies mid-answer, it continues on a survivor through the router (an exact
continuation: the prompt's ids and the generated ids, the remaining budget; the request again as it
was where the engine stopped before the first chunk) or ends with an explicit error event, never a
clean end without `finish_reason` (docs/fleet.md "Streams through faults").

With a program after `--` (the router, as the plan's router process runs it) the front starts it as
its child, answers /health only while it runs, and exits with it; SIGTERM stops taking connections,
lets the streams in flight finish within the drain budget, then stops the child.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import aiohttp
from aiohttp import web

from entrypoint.front import stream as S

HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "content-length", "host", "content-encoding"}
MAX_BODY = 64 * 1024 * 1024  # a request body the front reads whole (a long prompt with images: base64)
DERENDER = "/v1/chat/completions/derender"
DERENDER_EVERY = 8  # after a seam, a chat stream's parsers run again every this many tokens (and at the end)


class Cut(Exception):
    """The engine's stream ended before its answer did."""


@dataclass
class Metrics:
    """The front's Prometheus counters (GET /metrics on its port)."""

    streams: int = 0
    completed: int = 0
    continued: int = 0  # streams continued on another engine at least once
    migrations: int = 0
    errors: Dict[str, int] = field(default_factory=dict)  # streams ended with an error event, by why
    chunks: int = 0
    active: int = 0
    passed: int = 0  # requests passed through untouched

    def text(self) -> str:
        lines = [
            "# HELP kimi_front_streams_total Streams the front relayed.", "# TYPE kimi_front_streams_total counter",
            f"kimi_front_streams_total {self.streams}",
            "# HELP kimi_front_streams_completed_total Streams that ended with their finish_reason.",
            "# TYPE kimi_front_streams_completed_total counter", f"kimi_front_streams_completed_total {self.completed}",
            "# HELP kimi_front_streams_continued_total Streams continued on another engine.",
            "# TYPE kimi_front_streams_continued_total counter", f"kimi_front_streams_continued_total {self.continued}",
            "# HELP kimi_front_migrations_total Continuations sent (a stream may need several).",
            "# TYPE kimi_front_migrations_total counter", f"kimi_front_migrations_total {self.migrations}",
            "# HELP kimi_front_chunks_total Chunks sent to clients.", "# TYPE kimi_front_chunks_total counter",
            f"kimi_front_chunks_total {self.chunks}",
            "# HELP kimi_front_streams_active Streams in flight.", "# TYPE kimi_front_streams_active gauge",
            f"kimi_front_streams_active {self.active}",
            "# HELP kimi_front_passed_total Requests passed through untouched.",
            "# TYPE kimi_front_passed_total counter", f"kimi_front_passed_total {self.passed}",
            "# HELP kimi_front_stream_errors_total Streams ended with an explicit error event, by reason.",
            "# TYPE kimi_front_stream_errors_total counter",
        ]
        lines += [f'kimi_front_stream_errors_total{{reason="{k}"}} {v}' for k, v in sorted(self.errors.items())]
        return "\n".join(lines) + "\n"


class Front:
    def __init__(self, upstream: str, migrations: int, drain_s: int, child: Sequence[str] = ()):
        self.upstream = upstream.rstrip("/")
        self.migrations = migrations
        self.drain_s = drain_s
        self.child_argv = list(child)
        self.child: Optional[asyncio.subprocess.Process] = None
        self.metrics = Metrics()
        self.draining = False
        self.session: Optional[aiohttp.ClientSession] = None
        self.max_model_len: Optional[int] = None

    # ------------------------------------------------------------ plumbing

    async def start_session(self, _app=None) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                             timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))

    async def close_session(self, _app=None) -> None:
        if self.session is not None:
            await self.session.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.on_startup.append(self.start_session)
        app.on_cleanup.append(self.close_session)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def health(self, request: web.Request) -> web.StreamResponse:
        if self.draining:
            return web.Response(status=503, text="draining")
        if self.child is not None and self.child.returncode is not None:
            return web.Response(status=503, text="router exited")
        try:
            assert self.session is not None
            async with self.session.get(self.upstream + "/health", timeout=aiohttp.ClientTimeout(total=5)) as up:
                body = await up.read()
                return web.Response(status=up.status, body=body)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return web.Response(status=503, text=f"router unreachable: {type(exc).__name__}")

    async def prometheus(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=self.metrics.text(), content_type="text/plain", charset="utf-8")

    @staticmethod
    def _headers(request: web.Request) -> Dict[str, str]:
        return {k: v for k, v in request.headers.items() if k.lower() not in HOP}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "POST" and request.path in S.STREAMED:
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and parsed.get("stream"):
                return await self.relay_stream(request, request.path, parsed)
        return await self.pass_through(request, body)

    async def pass_through(self, request: web.Request, body: bytes) -> web.StreamResponse:
        """The request as it came, the answer as it comes; an answer cut mid-body is cut for the
        client too (the connection dropped, never a clean end)."""
        self.metrics.passed += 1
        assert self.session is not None
        response: Optional[web.StreamResponse] = None
        try:
            up_cm = self.session.request(request.method, self.upstream + request.path_qs, data=body or None,
                                         headers=self._headers(request), allow_redirects=False)
            async with up_cm as up:
                response = web.StreamResponse(status=up.status, reason=up.reason)
                for key, value in up.headers.items():
                    if key.lower() not in HOP:
                        response.headers.add(key, value)
                if up.headers.get("Content-Length") is not None and "chunked" not in up.headers.get(
                        "Transfer-Encoding", ""):
                    response.content_length = int(up.headers["Content-Length"])
                await response.prepare(request)
                async for piece in up.content.iter_any():
                    await response.write(piece)
                await response.write_eof()
                return response
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            if response is not None and response.prepared:  # cut mid-body: the client's cut too
                if request.transport is not None:
                    request.transport.close()
                return response
            return web.json_response({"error": {"message": f"the router did not answer: {type(exc).__name__}",
                                                "type": "bad_gateway", "param": None, "code": 502}}, status=502)

    # ------------------------------------------------------------ streams

    async def _model_len(self, model: Optional[str]) -> Optional[int]:
        """The served model's context (GET /v1/models: vLLM's max_model_len), for a chat stream's
        continuation that has no budget of its own."""
        if self.max_model_len is None:
            try:
                assert self.session is not None
                async with self.session.get(self.upstream + "/v1/models",
                                            timeout=aiohttp.ClientTimeout(total=10)) as up:
                    data = await up.json(content_type=None)
                for card in data.get("data") or ():
                    if card.get("max_model_len") and (model is None or card.get("id") == model):
                        self.max_model_len = int(card["max_model_len"])
                        break
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError):
                return None
        return self.max_model_len

    async def relay_stream(self, request: web.Request, path: str, body: Dict[str, Any]) -> web.StreamResponse:
        self.metrics.streams += 1
        self.metrics.active += 1
        try:
            return await self._relay(request, path, body)
        finally:
            self.metrics.active -= 1

    async def _relay(self, request: web.Request, path: str, body: Dict[str, Any]) -> web.StreamResponse:
        why = S.reason(path, body)
        progress = S.Progress(path=path, body=body, continuable=why)
        if path == S.CHAT and why is None:
            progress.chat = S.ChatState()
        payload: Dict[str, Any] = S.upstream_body(body, why is None)
        url = self.upstream + path
        headers = self._headers(request)
        response: Optional[web.StreamResponse] = None
        derendered = 0  # chat after a seam: tokens the parsers have seen
        started_at = -1  # tokens generated when the last continuation was sent (-1: none sent)
        resent: Optional[str] = None  # why the request was last sent again whole, until its first chunk
        assert self.session is not None
        while True:
            try:
                async with self.session.post(url, data=json.dumps(payload), headers={
                        **headers, "Content-Type": "application/json"}) as up:
                    if up.status != 200:
                        data = await up.read()
                        if response is None and progress.attempts == 0:  # the router's own answer: as it is
                            return web.Response(status=up.status, body=data,
                                                content_type=up.content_type or "application/json")
                        raise Cut(f"the continuation was answered HTTP {up.status}: "
                                  f"{data[:200].decode('utf-8', 'replace')}")
                    if response is None:
                        response = web.StreamResponse(status=200, headers={
                            "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
                            "X-Accel-Buffering": "no"})
                        await response.prepare(request)
                    async for text in _sse(up.content):
                        if text == S.DONE:
                            break
                        chunk = json.loads(text)
                        if not isinstance(chunk, dict):
                            continue
                        if chunk.get("error") and not chunk.get("choices"):
                            raise Cut(_error_message(chunk["error"]))
                        if progress.attempts == 0:
                            out = S.take(progress, chunk)
                            if resent is not None and progress.first_id is not None:  # under the id it now has
                                print(f"kimi-serve front: stream {progress.first_id} continued at token 0 (sent "
                                      f"again whole, try {progress.restarts}): {resent[:200]}", file=sys.stderr, flush=True)
                                resent = None
                            if out is not None:
                                await self._send(response, out)
                        elif path == S.COMPLETIONS:
                            out = S.continued(progress, chunk)
                            if out is not None:
                                await self._send(response, out)
                        else:
                            if S.record(progress, chunk) and not progress.finished and \
                                    len(progress.generated) - derendered >= DERENDER_EVERY:
                                derendered = await self._chat_delta(response, progress, derendered, final=False)
                if progress.finished:
                    if progress.attempts and path == S.CHAT:
                        await self._chat_delta(response, progress, derendered, final=True)
                    await self._finish(response, progress)
                    self.metrics.completed += 1
                    return response
                raise Cut("the engine's stream ended before its answer did")
            except (aiohttp.ClientError, asyncio.TimeoutError, Cut, ValueError) as exc:
                if request.transport is None or request.transport.is_closing():
                    return response or web.Response(status=499)  # the client left
                cause = str(exc) or type(exc).__name__
                if response is None and progress.attempts == 0 and not isinstance(exc, Cut):
                    self._count_error("router_unreachable")
                    return web.json_response({"error": {"message": f"the router did not answer: {cause}",
                                                        "type": "bad_gateway", "param": None, "code": 502}},
                                             status=502)
                if progress.first_id is None:
                    # cut before the engine's first chunk: the client has seen nothing but the headers, so the
                    # request is sent again whole, exact whatever it asks (n, logprobs, structured output)
                    if progress.restarts >= self.migrations:
                        return await self._fail(request, response, progress, "no_survivor",
                                                f"the engine serving this stream stopped before its first token, and "
                                                f"no other engine took it ({progress.restarts} tries) ({cause})")
                    progress.restarts += 1
                    self._moved(progress)
                    resent = cause
                    await asyncio.sleep(min(2.0, 0.25 * progress.restarts))  # the router's health checks catch up
                    continue
                stop = self._cannot_continue(progress, len(progress.generated) == started_at)
                if stop is not None:
                    return await self._fail(request, response, progress, stop[0], f"{stop[1]} ({cause})")
                if progress.remaining() == 0 and response is not None:  # cut after its last token: the answer is whole
                    progress.finish_reason = "length"
                    if path == S.CHAT and progress.attempts:
                        await self._chat_delta(response, progress, derendered, final=True)
                    await self._finish(response, progress)
                    self.metrics.completed += 1
                    return response
                progress.attempts += 1
                self._moved(progress)
                print(f"kimi-serve front: stream {progress.first_id} continued at token {len(progress.generated)} "
                      f"(continuation {progress.attempts}): {cause[:200]}", file=sys.stderr, flush=True)
                payload = S.continuation(progress)
                if path == S.CHAT and payload.get("max_tokens") is None:
                    length = await self._model_len(body.get("model"))
                    if length is not None:
                        payload["max_tokens"] = max(1, length - len(payload["prompt"]))
                url = self.upstream + S.COMPLETIONS
                derendered = started_at = len(progress.generated)
                await asyncio.sleep(min(2.0, 0.25 * progress.attempts))  # the router's health checks catch up

    def _moved(self, progress: S.Progress) -> None:
        """Count a stream's move to another engine (sent again whole, or continued): every move, and the
        stream once, at its first."""
        self.metrics.migrations += 1
        if progress.restarts + progress.attempts == 1:
            self.metrics.continued += 1

    def _cannot_continue(self, progress: S.Progress, stalled: bool = False):
        """Why the stream ends here (the metric's reason and the client's message), or None: continue
        it. `stalled`: the last continuation gave no token (no engine could take it)."""
        if progress.continuable is not None:
            return "not_continuable", f"the engine serving this stream stopped, and it cannot be continued on " \
                                      f"another: {progress.continuable}"
        if progress.prompt_ids is None:
            return "no_token_ids", "the engine serving this stream stopped before it gave the prompt's token ids " \
                                   "(vLLM 0.32 or later gives them), so it cannot be continued"
        if progress.attempts >= self.migrations and stalled:
            return "no_survivor", f"the engine serving this stream stopped, and no other engine could continue " \
                                  f"it ({progress.attempts} tries)"
        if progress.attempts >= self.migrations:
            return "migrations_exhausted", f"the stream was continued {progress.attempts} times, the front's " \
                                           f"limit, and its engine stopped again"
        return None

    def _count_error(self, why: str) -> None:
        self.metrics.errors[why] = self.metrics.errors.get(why, 0) + 1

    async def _fail(self, request, response, progress, why: str, message: str) -> web.StreamResponse:
        self._count_error(why)
        print(f"kimi-serve front: stream {progress.first_id} ended with an error event: {message[:300]}",
              file=sys.stderr, flush=True)
        if response is None:
            return web.json_response({"error": {"message": message, "type": "stream_interrupted", "param": None,
                                                "code": 502}}, status=502)
        try:
            await response.write(S.error_event(message))
            await response.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass
        return response

    async def _send(self, response: web.StreamResponse, chunk: Dict[str, Any]) -> None:
        self.metrics.chunks += 1
        await response.write(S.sse(chunk))

    async def _chat_delta(self, response, progress: S.Progress, sent: int, final: bool) -> int:
        """The rest of a chat message after the seam: the parsers (the engines' derender endpoint)
        read every token so far; the delta is what they give beyond what was sent, with the token ids
        since the last delta (`sent`: tokens whose ids the client has). Gives the tokens sent now."""
        assert self.session is not None and progress.chat is not None
        body = {"model": progress.body.get("model"), "prompt_token_ids": progress.prompt_ids,
                "prompt_tokens": len(progress.prompt_ids or ()),
                "generate_response": {"request_id": progress.first_id or "kimi-front", "choices": [
                    {"index": 0, "token_ids": list(progress.generated),
                     "finish_reason": progress.finish_reason if final else None}]},
                "chat_request": {k: v for k, v in progress.body.items() if k not in ("stream", "stream_options")}}
        async with self.session.post(self.upstream + DERENDER, json=body) as up:
            data = await up.json(content_type=None)
            if up.status != 200:
                raise Cut(f"the engines could not parse the continued answer (HTTP {up.status}): "
                          f"{str(data)[:200]}")
        message = ((data.get("choices") or [{}])[0]).get("message") or {}
        delta = progress.chat.delta_to(message, final)
        if delta is None:
            return sent
        finish = progress.finish_reason if final else None
        ids = progress.generated[sent:]
        if delta or finish is not None or ids:
            await self._send(response, S.chat_chunk(progress, delta, finish, ids))
        return len(progress.generated)

    async def _finish(self, response: web.StreamResponse, progress: S.Progress) -> None:
        if progress.wants_usage:
            await self._send(response, S.usage_chunk(progress))
        await response.write(S.sse(S.DONE))
        await response.write_eof()

    # ------------------------------------------------------------ the child and the drain

    async def run(self, host: str, port: int) -> int:
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        if self.child_argv:
            self.child = await asyncio.create_subprocess_exec(*self.child_argv, start_new_session=False)
        await site.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        waits: List[asyncio.Future] = [asyncio.ensure_future(stop.wait())]
        if self.child is not None:
            waits.append(asyncio.ensure_future(self.child.wait()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        code = 0
        if self.child is not None and self.child.returncode is not None and not stop.is_set():
            code = self.child.returncode or 1
            print(f"kimi-serve front: the router exited with {self.child.returncode}; stopping", file=sys.stderr,
                  flush=True)
        self.draining = True
        await site.stop()  # no new connections; the streams in flight go on
        end = time.monotonic() + self.drain_s
        while self.metrics.active and time.monotonic() < end:
            await asyncio.sleep(0.1)
        if self.child is not None and self.child.returncode is None:
            self.child.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.child.wait(), timeout=30)
            except asyncio.TimeoutError:
                self.child.kill()
                await self.child.wait()
        await runner.cleanup()
        for task in waits:
            task.cancel()
        return code


async def _sse(content: aiohttp.StreamReader):
    """The `data:` payloads of an SSE body, as they come (stream.Events)."""
    reader = S.Events()
    async for raw in content:
        payload = reader.line(raw)
        if payload is not None:
            yield payload
    payload = reader.end()
    if payload is not None:
        yield payload


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:300]
    return str(error)[:300]


def serve(host: str, port: int, upstream: str, migrations: int, drain_s: int, child: Sequence[str]) -> int:
    """Run the front until SIGTERM (or its child's exit); its exit code."""
    front = Front(upstream, migrations, drain_s, child)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:  # uvloop where the image has it (vLLM's own dependency): its event loop relays a chunk for less CPU
        import uvloop  # noqa: PLC0415 - optional
    except ImportError:
        return asyncio.run(front.run(host, port))
    return uvloop.run(front.run(host, port))
