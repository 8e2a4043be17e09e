"""Misbehaving HTTP servers on 127.0.0.1 for the edge tests: each serves connections with one
behaviour, in a daemon thread, and stops itself after `lifetime_s` (or when the `with` ends), so
a client that hangs can never keep a test running."""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable

OK_HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


def _sleep_send(conn, data: bytes, every_s: float, stop: threading.Event, chunk: int = 1) -> None:
    for i in range(0, len(data), chunk):
        if stop.wait(every_s):
            return
        conn.sendall(data[i:i + chunk])


def garbage(conn, stop):
    conn.sendall(b"\xff\xfe\x00garbage that is not HTTP\r\n\r\n\x00\x01" * 50)


def slow_headers(conn, stop):
    """One header byte every 0.5 s: never a full status line within any sane deadline."""
    _sleep_send(conn, OK_HEADERS + b"Content-Length: 2\r\n\r\n{}", 0.5, stop)


def trickled_body(conn, stop):
    body = b'{"object": "list", "data": [' + b" " * 10_000 + b"]}"
    conn.sendall(OK_HEADERS + f"Content-Length: {len(body)}\r\n\r\n".encode())
    _sleep_send(conn, body, 0.2, stop)


def endless_body(conn, stop):
    conn.sendall(OK_HEADERS + b"\r\n")  # no length: the body ends when the connection does
    block = b"x" * 65536
    while not stop.is_set():
        conn.sendall(block)


def huge_header(conn, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Big: ")
    block = b"a" * 65536
    while not stop.is_set():
        conn.sendall(block)


def healthy(conn, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


class Server:
    """`with Server(behaviour) as srv:` serves on srv.port until the block ends or lifetime_s."""

    def __init__(self, behaviour: Callable, host: str = "127.0.0.1", lifetime_s: float = 30.0):
        self.behaviour, self.host, self.lifetime_s = behaviour, host, lifetime_s
        self.stop = threading.Event()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _serve(self) -> None:
        deadline = time.monotonic() + self.lifetime_s
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
        self.stop.set()
        self.sock.close()

    def _handle(self, conn) -> None:
        with conn:
            try:
                conn.settimeout(5)
                try:
                    conn.recv(65536)  # the request (not parsed)
                except OSError:
                    pass
                self.behaviour(conn, self.stop)
            except OSError:
                pass  # the client gave up: what a bounded client does

    def __enter__(self) -> "Server":
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
