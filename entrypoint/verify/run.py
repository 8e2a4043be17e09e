"""Verify a running Kimi server: health, model name, chat, reasoning, tools, images, streaming.

Every check ends as pass, fail or skip (with why), within its own deadline. A server that refuses
connections, hangs, drips, answers garbage or too much yields a failed check, never an exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from entrypoint.verify.checks import ChatFacts, Verifier, skip_reason
from entrypoint.verify.client import CheckFailed, Server, normalize_url
from entrypoint.verify.load import LoadRun, run_load
from entrypoint.verify.report import FAIL, PASS, SKIP, ServerCheck, VerifyReport


def _timed(name: str, run: Callable[[], str], server: Server, seconds: float) -> ServerCheck:
    server.begin(seconds)
    start = time.perf_counter()
    try:
        status, detail = PASS, run()
    except CheckFailed as failure:
        status, detail = FAIL, str(failure)
    except Exception as error:  # a shape no check anticipated must still be a failed check
        status, detail = FAIL, f"unexpected answer ({type(error).__name__}: {error})"
    latency_ms = round((time.perf_counter() - start) * 1000, 1)
    return ServerCheck(name, status, detail, latency_ms, server.tokens)


def run_verify(
    url: str,
    *,
    model: str | None,
    expected_model: str | None,
    features: frozenset[str],
    timeout: float,
    chat: ChatFacts,
    concurrency: int = 1,
) -> VerifyReport:
    """Run every check against the server at url, each within `timeout` seconds in all; checks
    that don't apply to features are skipped. With concurrency > 1 the load checks follow
    (entrypoint.verify.load: tools, thinking and streaming, that many streams at once)."""
    url = normalize_url(url)
    server = Server(url)
    verifier = Verifier(server, model, expected_model, features, chat)
    results: list[ServerCheck] = []
    blocked = None  # why the remaining checks cannot run
    try:
        for name, run in verifier.checks():
            skip = skip_reason(name, features, chat)
            if skip:
                results.append(ServerCheck(name, SKIP, skip))
                continue
            if blocked:
                results.append(ServerCheck(name, FAIL, f"not run: {blocked}"))
                continue
            check = _timed(name, run, server, timeout)
            results.append(check)
            if name == "health" and check.status == FAIL:
                blocked = "the server is not ready (/health failed)"
            elif name == "models" and verifier.model is None:
                blocked = "no model name to send (/v1/models did not name one; pass --model)"
        if concurrency > 1:
            load = LoadRun(verifier, concurrency, timeout)
            results += run_load(load, lambda name, run: _timed(name, run, server, timeout), blocked)
    finally:
        server.close()
    return VerifyReport(url, verifier.model, tuple(results))
