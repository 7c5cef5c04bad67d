"""The panel, API and WebSockets over HTTPS, seen by a sniffer on the wire.

A real agent serves its web port; a packet socket on `lo` (tests/sniffer.py)
records every byte to and from that port while an operator logs in with a
password, a script calls the API with a bearer token, and a browser-like client
opens a WebSocket with the session cookie. Over HTTPS (the default) none of the
three secrets may appear in the capture; with WEB_PLAIN = 1, the control, the
same sniffer must find every one of them (else it proves nothing).
"""

from __future__ import annotations

import asyncio
import hashlib
import http.cookiejar
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest
from harness import ROOT, listening, wait_until
from sniffer import Sniffer, available
from websockets.asyncio.client import connect

pytestmark = pytest.mark.agents

PASSWORD = "sniff-me-Passphrase-4821"


def _stkuser(agent, *args: str, stdin: str | None = None) -> str:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STK_")}
    env["STK_INI"] = str(agent.ini)
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "stkuser", *args], capture_output=True,
                         text=True, timeout=60, cwd=ROOT, env=env, input=stdin)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


def _relayctl_tls(agent) -> dict:  # type: ignore[no-untyped-def, type-arg]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STK_")}
    env["STK_INI"] = str(agent.ini)
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", "tls", "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def _served(agent) -> str:  # type: ignore[no-untyped-def]
    """The SHA-256 of the certificate the agent's web port presents in a handshake (no trust)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    raw = socket.create_connection((agent.ip, int(agent.setting("WEB_PORT"))), timeout=10)
    with ctx.wrap_socket(raw) as tls:
        return hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()


def _browser(agent) -> tuple[urllib.request.OpenerDirector, http.cookiejar.CookieJar]:  # type: ignore[no-untyped-def]
    jar = http.cookiejar.CookieJar()
    handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPCookieProcessor(jar)]
    if not agent.plain:
        handlers.append(urllib.request.HTTPSHandler(context=agent.web_ssl()))
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), *handlers), jar


def _operate(agent, token: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Log in, call the API, watch a stream over a WebSocket; the secrets that crossed the wire."""
    browser, jar = _browser(agent)
    with browser.open(f"{agent.web_url}/login/", timeout=10) as page:
        form = page.read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert csrf is not None
    body = urllib.parse.urlencode({"csrfmiddlewaretoken": csrf.group(1), "username": "olga",
                                   "password": PASSWORD, "next": "/"}).encode()  # fmt: skip
    login = urllib.request.Request(f"{agent.web_url}/login/", data=body, headers={"Origin": agent.web_url})
    with browser.open(login, timeout=10) as landed:
        assert landed.status == 200 and "/login/" not in landed.url, landed.url
    session = next(c for c in jar if c.name == "stk_session")
    assert session.secure is not agent.plain  # Secure over HTTPS: the browser never sends it in clear

    bearer = {"Authorization": f"Bearer {token}"}
    api = urllib.request.Request(f"{agent.web_url}/api/v1/sites", headers=bearer)
    with agent.urlopen(api, timeout=10) as answer:
        assert answer.status == 200 and json.loads(answer.read())["sites"]
        hsts = answer.headers.get("Strict-Transport-Security")
    assert (hsts is None) if agent.plain else hsts.startswith("max-age=")

    async def watch() -> dict:  # type: ignore[type-arg]
        headers = {"Cookie": f"stk_session={session.value}", "Origin": agent.web_url}
        url = f"{agent.ws_url}/ws/stream/S001/"
        async with connect(url, additional_headers=headers, ssl=agent.web_ssl(), open_timeout=10) as ws:
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    assert asyncio.run(watch())["type"] == "registered"  # the cookie logged the WebSocket in
    return {"password": PASSWORD, "api token": token, "session id": session.value}


@pytest.mark.parametrize("plain", [False, True], ids=["https", "plain-control"])
def test_a_lan_sniffer_sees_no_password_token_or_session_id_unless_web_plain(site_factory, plain):
    why = available()
    if why:
        pytest.skip(why)
    site = site_factory(n=1, extra={"WEB_PLAIN": "1"} if plain else {})
    (agent,) = site.agents
    site.start()
    site.wait_leader(60)
    port = int(agent.setting("WEB_PORT"))
    wait_until(lambda: listening(agent.ip, port), 30, "the agent's web port")
    _stkuser(agent, "add", "olga", "--role", "operator", "--password-file", "-", stdin=PASSWORD + "\n")
    token = _stkuser(agent, "token", "olga")
    wait_until(lambda: (agent.data_dir / "pool.json").exists(), 30, "the agent's pool view")

    with Sniffer(port) as sniff:
        secrets = _operate(agent, token)
    streams = sniff.stop()
    sent = sum(len(data) for data in streams.values())
    assert len(streams) >= 6 and sent > 4000, f"too little seen: {len(streams)} streams, {sent} bytes"
    found = {name: sniff.seen(value.encode()) for name, value in secrets.items()}
    if plain:  # the control: the same capture, in clear, holds every secret
        assert all(found.values()), found
    else:
        assert not any(found.values()), found
        # ...and it is TLS that it saw: each connection opens with a TLS handshake record.
        to_server = [data for (_, _, _, dport), data in streams.items() if dport == port]
        assert to_server and all(data[:1] == b"\x16" for data in to_server)


@pytest.mark.long
def test_relayctl_tls_prints_the_fingerprint_the_web_port_serves_and_every_heartbeat_carries_it(site_factory):
    site = site_factory(n=2)
    site.start()
    site.wait_settled(60)
    a, b = site.agents
    for agent in site.agents:
        wait_until(lambda agent=agent: listening(agent.ip, int(agent.setting("WEB_PORT"))), 30, "web ports")
    served = {agent.name: _served(agent) for agent in site.agents}
    assert served[a.name] != served[b.name]  # one certificate per agent

    def both_heartbeats() -> dict | None:  # type: ignore[type-arg]
        doc = _relayctl_tls(a)
        return doc if all(doc["members"].get(n) for n in served) else None

    doc = wait_until(both_heartbeats, 30, "both members' fingerprints in S001's view")
    assert doc["sha256"] == served[a.name] and not doc["plain"]
    assert doc["url"] == f"{a.web_url}/"
    assert doc["members"] == served  # S001 shows S002's certificate, as S002 serves it
    b.terminate()  # a restart keeps the certificate: pinned clients keep working
    b.start()
    wait_until(lambda: listening(b.ip, int(b.setting("WEB_PORT"))), 60, "S002's web port again")
    assert _served(b) == served[b.name]


def test_plain_http_to_the_https_port_is_redirected_with_a_one_line_hint_and_https_still_serves(site_factory):
    # Issue 42: `curl http://agent:port/` got an empty reply (a TLS handshake error) and no hint.
    import http.client

    site = site_factory(n=1)
    (agent,) = site.agents
    site.start()
    port = int(agent.setting("WEB_PORT"))
    wait_until(lambda: listening(agent.ip, port), 60, "the agent's web port")
    conn = http.client.HTTPConnection(agent.ip, port, timeout=10)
    conn.request("GET", "/sites/?q=1", headers={"Host": "evil.example"})
    answer = conn.getresponse()
    body = answer.read().decode()
    url = f"https://{agent.ip}:{port}/sites/?q=1"  # this agent's own address, never the client's Host
    assert (answer.status, answer.getheader("Location")) == (301, url)
    assert body == f"This port speaks HTTPS: {url}\n"
    with socket.create_connection(
        (agent.ip, port), timeout=10
    ) as raw:  # not even HTTP: the hint all the same
        raw.sendall(b"hello\r\n")
        assert b"This port speaks HTTPS" in raw.recv(4096)
    site.wait_leader(60)
    wait_until(lambda: agent.state().get("leader"), 30, "the agent's state")
    with agent.urlopen("/healthz", timeout=10) as r:  # TLS on the same port, as before
        assert r.status == 200 and json.loads(r.read())["status"] == "up"
