"""entrypoint/core/base/bounded.py against local servers: what it reads, and where it stops."""

from __future__ import annotations

import time

import pytest

from entrypoint.core.base.bounded import HttpError, open_request, parse_url, request

from .servers import Server, endless_body, garbage, huge_header, slow_headers, trickled_body


def _send(payload: bytes):
    def behaviour(conn, stop):
        conn.sendall(payload)
    return behaviour


def test_content_length_and_json():
    with Server(_send(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": [1]}\nEXTRA")) as srv:
        resp = request("GET", srv.url + "/x", timeout=5)
    assert resp.status_code == 200 and resp.json() == {"a": [1]}


def test_chunked_stream_until_done():
    events = b"data: {\"n\": 1}\n\ndata: [DONE]\n\n"
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)
    with Server(_send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)) as srv:
        with open_request("POST", srv.url, json_body={"stream": True}, timeout=5) as resp:
            lines = list(resp.iter_lines())
        whole = request("POST", srv.url, json_body={}, timeout=5, until=b"data: [DONE]")
    assert lines[0] == 'data: {"n": 1}' and "data: [DONE]" in lines
    assert whole.content.startswith(events[:20])


@pytest.mark.slow
@pytest.mark.parametrize("behaviour,words", [(garbage, "not HTTP"), (huge_header, "longer than"),
                                             (endless_body, "larger than"), (slow_headers, "within 1 s"),
                                             (trickled_body, "within 1 s")])
def test_each_misbehaviour_ends_in_one_line_within_the_deadline(behaviour, words):
    with Server(behaviour, lifetime_s=60) as srv:
        start = time.monotonic()
        with pytest.raises(HttpError) as info:
            request("GET", srv.url, timeout=1, max_bytes=1024 * 1024)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert time.monotonic() - start < 10  # a bound (the deadline is 1 s), not a speed target


def test_announced_length_past_the_cap():
    with Server(_send(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n")) as srv:
        with pytest.raises(HttpError, match="at most"):
            request("GET", srv.url, timeout=5, max_bytes=1000)


def test_refused_connection():
    with Server(_send(b"")) as srv:
        port = srv.port
    time.sleep(0.5)  # the listener has closed
    with pytest.raises(HttpError, match="cannot connect"):
        request("GET", f"http://127.0.0.1:{port}", timeout=2)


@pytest.mark.parametrize("url", ["http://[::1", "ftp://x", "http://", "x", "http://h:99999"])
def test_urls_that_are_not_urls(url):
    with pytest.raises(ValueError):
        parse_url(url)


def test_ipv6_url():
    assert parse_url("http://[::1]:8000/v1").url == "http://[::1]:8000/v1"
