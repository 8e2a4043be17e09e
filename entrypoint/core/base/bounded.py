"""HTTP/1.1 requests with a total deadline and a size cap: what healthcheck, verify and the
object-store check use.

Per-read timeouts (urllib, httpx) do not bound a request: a server that sends one byte every
half second keeps each read short and the request alive for ever, and an endless body grows
memory without limit. Here every request has one deadline for connect + headers + body (each
socket read waits at most for the time left) and the status line, headers and body have byte
caps (core/base/limits.py). Whatever the server does, the outcome is a Response or an HttpError
with one line saying what happened; nothing else escapes. Standard library only.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional
from urllib.parse import urlsplit

from entrypoint.core.base import limits
from entrypoint.core.base.net import connect

_STATUS = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: ([^\r\n]*))?")


class HttpError(Exception):
    """The request did not get a well-formed answer in time; str() is one line for a user."""


class Late(HttpError):
    """The deadline passed before the whole answer came."""


class ConnectionRefused(HttpError):
    """Nothing listens on the port (yet): vLLM opens it once the model is loaded."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    base_path: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}"


def parse_url(url: str) -> Target:
    """http(s)://host[:port][/base]; ValueError with the reason otherwise."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    return Target(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80),
                  parts.path.rstrip("/"))


@dataclass
class Response:
    status_code: int
    reason: str
    headers: dict  # lower-case name -> value
    content: bytes = b""
    _chunks: Optional[Iterator[bytes]] = field(default=None, repr=False)  # the unread body
    longest_gap_s: float = 0.0  # the longest wait for the next piece of the body (request(): a stream's silence)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        """The body as JSON; ValueError when it is not (also for nesting past the bound)."""
        try:
            return json.loads(self.content)
        except RecursionError:
            raise ValueError("JSON nested too deep") from None

    def iter_lines(self) -> Iterator[str]:
        """A streamed body, line by line (server-sent events), under the same deadline and cap."""
        return _lines(self._chunks) if self._chunks is not None else iter(self.text.splitlines())


class _Reader:
    def __init__(self, sock: socket.socket, deadline: float, timeout: float, max_bytes: int):
        self.sock, self.deadline, self.timeout, self.max_bytes = sock, deadline, timeout, max_bytes
        self.buffer = b""
        self.body_bytes = 0
        self.eof = False

    def _late(self) -> HttpError:
        return Late(f"no answer within {self.timeout:g} s (or only part of one: the server hangs, is "
                         "overloaded or sends slowly)")

    def _fill(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._late()
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise self._late() from None
        if not data:
            self.eof = True
        self.buffer += data

    def until(self, marker: bytes, cap: int, what: str) -> bytes:
        while marker not in self.buffer:
            if len(self.buffer) > cap:
                raise HttpError(f"the {what} is longer than {cap} bytes: not an HTTP server's answer")
            if self.eof:
                raise HttpError(f"the connection closed in the middle of the {what}")
            self._fill()
        head, _, self.buffer = self.buffer.partition(marker)
        if len(head) > cap:
            raise HttpError(f"the {what} is longer than {cap} bytes: not an HTTP server's answer")
        return head

    def exactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            if self.eof:
                raise HttpError("the connection closed before the end of the body")
            self._fill()
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def chunks(self, headers: dict) -> Iterator[bytes]:
        """The body's bytes as they come: chunked, by Content-Length, or up to the close."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = self.until(b"\r\n", 1024, "chunk size line").split(b";")[0].strip()
                if not re.fullmatch(rb"[0-9a-fA-F]{1,8}", size_line):
                    raise HttpError("a chunk of the body has no valid size: not an HTTP server's answer")
                size = int(size_line, 16)
                if size == 0:
                    return
                yield self._count(self.exactly(size))
                self.exactly(2)
        length = headers.get("content-length")
        if length is not None:
            if not re.fullmatch(r"[0-9]{1,12}", length.strip()):
                raise HttpError(f"Content-Length {length[:20]!r} is not a number")
            left = int(length)
            if left > self.max_bytes:
                raise HttpError(f"the answer announces {left} bytes; at most {_size(self.max_bytes)} are read")
            while left:
                if not self.buffer:
                    if self.eof:
                        raise HttpError("the connection closed before the end of the body")
                    self._fill()
                data, self.buffer = self.buffer[:left], self.buffer[left:]
                left -= len(data)
                yield self._count(data)
            return
        while True:
            if self.buffer:
                data, self.buffer = self.buffer, b""
                yield self._count(data)
            if self.eof:
                return
            self._fill()

    def _count(self, data: bytes) -> bytes:
        self.body_bytes += len(data)
        if self.body_bytes > self.max_bytes:
            raise HttpError(f"the answer is larger than {_size(self.max_bytes)} (the cap of this client)")
        return data


def _size(count: int) -> str:
    for unit, size in (("MiB", 1024 ** 2), ("KiB", 1024)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


def _connect(target: Target, deadline: float, timeout: float) -> socket.socket:
    try:
        sock = connect(target.host, target.port, max(deadline - time.monotonic(), 0.001))  # the lookup too
        if target.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=target.host)
        return sock
    except socket.timeout:
        raise Late(f"cannot connect to {target.url} within {timeout:g} s") from None
    except ConnectionRefusedError:
        raise ConnectionRefused(f"cannot connect to {target.url} (connection refused)") from None
    except ssl.SSLError as exc:
        raise HttpError(f"TLS with {target.url} failed ({exc.reason or exc})") from None
    except OSError as exc:
        raise HttpError(f"cannot connect to {target.url} ({exc.strerror or exc}); is the server running?") from None


def _headers(raw: bytes) -> tuple:
    lines = raw.split(b"\r\n")
    match = _STATUS.fullmatch(lines[0])
    if not match:
        raise HttpError(f"the answer is not HTTP: {lines[0][:60]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name.strip():
            raise HttpError(f"a header line of the answer is malformed: {line[:60]!r}")
        headers[name.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")
    return int(match.group(1)), (match.group(2) or b"").decode("latin-1"), headers


@contextmanager
def open_request(method: str, url: str, *, timeout: float, json_body=None, headers: Optional[dict] = None,
                 max_bytes: int = limits.MAX_HTTP_BODY_BYTES) -> Iterator[Response]:
    """A request whose body is read as the caller iterates `iter_lines()` (streams); `timeout`
    bounds the whole exchange, body included."""
    deadline = time.monotonic() + timeout
    try:
        target = parse_url(url)
    except ValueError as exc:
        raise HttpError(str(exc)) from None
    path = target.base_path + "/" if not target.base_path else target.base_path
    query = urlsplit(url.strip()).query
    path += f"?{query}" if query else ""
    body = b"" if json_body is None else json.dumps(json_body).encode()
    host = f"[{target.host}]" if ":" in target.host else target.host
    given = {k.lower() for k in (headers or {})}
    lines = [f"{method} {path} HTTP/1.1"] + ([] if "host" in given else [f"Host: {host}:{target.port}"]) + \
        ["Connection: close", "Accept: application/json, text/event-stream", "User-Agent: kimi-serve"]
    if json_body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    sock = _connect(target, deadline, timeout)
    try:
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        except OSError as exc:
            raise HttpError(f"the server closed the connection while the request was sent ({exc.strerror or exc})") \
                from None
        reader = _Reader(sock, deadline, timeout, max_bytes)
        try:
            status, reason, head = _headers(reader.until(b"\r\n\r\n", limits.MAX_HTTP_HEADER_BYTES, "header block"))
        except OSError as exc:
            raise HttpError(f"the connection failed while waiting for the answer ({exc.strerror or exc})") from None
        response = Response(status, reason, head)
        response._chunks = reader.chunks(head)
        yield response
    finally:
        sock.close()


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    pending = b""
    try:
        for chunk in chunks:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.rstrip(b"\r").decode("utf-8", "replace")
    except OSError as exc:
        raise HttpError(f"the connection failed while reading the answer ({exc.strerror or exc})") from None
    if pending:
        yield pending.decode("utf-8", "replace")


def request(method: str, url: str, *, timeout: float, json_body=None, headers: Optional[dict] = None,
            max_bytes: int = limits.MAX_HTTP_BODY_BYTES, until: Optional[bytes] = None) -> Response:
    """The whole answer, read within `timeout` seconds in total and at most `max_bytes` of body;
    with `until` (e.g. b"data: [DONE]" of a stream) reading stops once those bytes have come."""
    with open_request(method, url, timeout=timeout, json_body=json_body, headers=headers,
                      max_bytes=max_bytes) as response:
        try:
            body, last = b"", time.monotonic()
            for chunk in response._chunks or ():  # open_request leaves the body unread
                now = time.monotonic()
                response.longest_gap_s, last = max(response.longest_gap_s, now - last), now
                body += chunk
                if until and until in body[-(len(chunk) + len(until)):]:
                    break
            response.content = body
        except OSError as exc:
            raise HttpError(f"the connection failed while reading the answer ({exc.strerror or exc})") from None
        response._chunks = None
        return response
