"""Refused request bodies (issue 28): a 20 MB body used to write two full
tracebacks (~40 lines) to the log per request. Now it is 413 before Django reads
it, one line per peer per minute: the middleware on its own, then a real agent."""

from __future__ import annotations

import asyncio
import http.client
import re
import ssl

import pytest
from harness import wait_until

from elections.web.body_limit import BodyLimit, PeerLogLimit
from stkhost.clock import FakeClock


def call(app, body_chunks, headers=(), path="/api/v1/x"):  # type: ignore[no-untyped-def]
    """Run one HTTP request through `app`; (status, body the app saw or None)."""
    seen: list[bytes] = []
    sent: list[dict] = []

    async def inner(scope, receive, send):  # type: ignore[no-untyped-def]
        parts = []
        while True:
            m = await receive()
            parts.append(m.get("body", b""))
            if not m.get("more_body"):
                break
        seen.append(b"".join(parts))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    messages = [{"type": "http.request", "body": c, "more_body": i < len(body_chunks) - 1}
                for i, c in enumerate(body_chunks)]  # fmt: skip

    async def receive():  # type: ignore[no-untyped-def]
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(m):  # type: ignore[no-untyped-def]
        sent.append(m)

    scope = {"type": "http", "method": "POST", "path": path, "client": ("192.0.2.9", 5000),
             "headers": list(headers)}  # fmt: skip
    wrapped = BodyLimit(inner, limit=1000, lines=PeerLogLimit(clock=FakeClock())) if app is None else app
    asyncio.run(wrapped(scope, receive, send))
    return sent[0]["status"], (seen[0] if seen else None), wrapped


def test_a_declared_length_over_the_limit_is_413_before_a_byte_is_read():
    status, seen, gate = call(None, [b"x" * 10], headers=[(b"content-length", b"20000000")])
    assert status == 413 and seen is None and gate.refused["too_large"] == 1


def test_a_chunked_body_is_cut_off_as_soon_as_it_passes_the_limit():
    status, seen, _ = call(None, [b"x" * 600, b"x" * 600, b"x" * 600])
    assert status == 413 and seen is None


def test_a_body_within_the_limit_reaches_the_app_whole():
    status, seen, _ = call(None, [b"a" * 400, b"b" * 400])
    assert status == 200 and seen == b"a" * 400 + b"b" * 400


def test_a_peer_gets_one_line_a_minute_then_a_count_of_what_was_left_out():
    clock = FakeClock()
    lines = PeerLogLimit(every=60, clock=clock, max_peers=3)
    assert lines.admit("192.0.2.1") == 0
    assert [lines.admit("192.0.2.1") for _ in range(5)] == [None] * 5
    assert lines.admit("192.0.2.2") == 0  # another peer is not held back
    clock.advance(60)
    assert lines.admit("192.0.2.1") == 5
    for i in range(10):
        lines.admit(f"198.51.100.{i}")
    assert len(lines._peers) == 3  # bounded


@pytest.mark.agents
@pytest.mark.long
def test_a_real_agent_answers_huge_bodies_413_with_one_line_and_no_traceback(site_factory):
    site = site_factory(1)
    site.start()
    site.wait_leader()
    agent = site.agents[0]
    ip, port = agent.setting("NODE_IP"), int(agent.setting("WEB_PORT"))
    tls = agent.web_ssl()

    def connect():  # type: ignore[no-untyped-def]
        if tls is None:
            return http.client.HTTPConnection(ip, port, timeout=30)
        return http.client.HTTPSConnection(ip, port, timeout=30, context=tls)

    c = connect()
    c.request("GET", "/login/")
    r = c.getresponse()
    page = r.read().decode()
    cookie = next(v for k, v in r.getheaders() if k.lower() == "set-cookie").split(";")[0]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    before = len(agent.log().splitlines())
    statuses = []
    for path in ("/login/", "/login/", "/api/v1/sites/x/drain"):  # a valid CSRF token: Django would read it
        c = connect()
        body = b"csrfmiddlewaretoken=" + token.encode() + b"&a=" + b"x" * 20_000_000
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie,
                   "Referer": f"{agent.web_url}/login/", "Origin": agent.web_url}  # fmt: skip
        try:
            c.request("POST", path, body=body, headers=headers)
            statuses.append(c.getresponse().status)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):  # refused before the body was all sent
            statuses.append("closed")
    assert all(s in (413, "closed") for s in statuses) and 413 in statuses, statuses
    wait_until(lambda: "refused request (too_large)" in agent.log(), 10, "the refusal's line")
    new = agent.log().splitlines()[before:]
    assert not any("Traceback" in line or "RequestDataTooBig" in line for line in new), new
    assert sum("refused request" in line for line in new) == 1, new  # one peer: one line a minute
    assert agent.alive()
