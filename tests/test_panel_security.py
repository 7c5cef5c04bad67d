"""Nothing from the LAN is trusted: Host headers, WebSocket origins, X-Forwarded-For,
CSV cells a spreadsheet would run, and passwords kept out of argv."""

from __future__ import annotations

import asyncio
import csv
import io
from datetime import timedelta

import pytest
import test_panel_support
from test_panel_support import KMSN, client_for, event, make_user

dj = test_panel_support.dj  # the fixture, under its name here


# -- Host ---------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["/", "/login/", "/healthz", "/api/v1/sites", "/static/panel.js"])
def test_a_request_for_a_foreign_host_is_a_bare_400(dj, url):
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example", "10.9.9.9"):
        response = client_for().get(url, HTTP_HOST=host)
        assert response.status_code == 400, (url, host)
        assert b"<form" not in response.content and b"<table" not in response.content


def test_the_agents_own_addresses_and_the_configured_names_are_served(dj):
    import socket

    from django.conf import settings

    # NODE_IP (127.0.0.1 here), loopback, the host name, then WEB_ALLOWED_HOSTS; never "*".
    name = socket.gethostname().lower()
    hosts = settings.ALLOWED_HOSTS
    assert hosts == ["127.0.0.1", "localhost", "[::1]", name, "testserver"]
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", f"{name}:8000", "testserver"):
        assert client_for().get("/login/", HTTP_HOST=host).status_code == 200, host


def test_the_vip_and_the_host_name_are_the_agents_own_names_and_nothing_else_is():
    from stkrelay.config_web import allowed_hosts

    hosts = allowed_hosts("192.168.1.10", ["panel.site.lan"], vip="192.168.1.250/24", hostname="Station-1.")
    loopback = ["localhost", "127.0.0.1", "[::1]"]
    assert hosts == ["192.168.1.10", *loopback, "station-1", "192.168.1.250", "panel.site.lan"]
    assert allowed_hosts("fd00::10", [], vip="", hostname="bad name!") == ["[fd00::10]", *loopback]


# -- WebSocket Origin -----------------------------------------------------------------------
@pytest.fixture
def ws(dj):
    """Connect to the ASGI app's WebSocket routes; (accepted, close code)."""
    from channels.testing import WebsocketCommunicator
    from django.test import override_settings

    from stkrelay.asgi import application

    async def connect(path: str, origin: str | None, host: str = "127.0.0.1:8000"):
        headers = [(b"host", host.encode())]
        if origin is not None:
            headers.append((b"origin", origin.encode()))
        comm = WebsocketCommunicator(application, path, headers=headers)
        accepted, code = await comm.connect(timeout=5)
        await comm.disconnect()
        return accepted, code

    layers = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    with override_settings(CHANNEL_LAYERS=layers):
        yield lambda path, origin, **kw: asyncio.run(connect(path, origin, **kw))


@pytest.mark.parametrize("path", ["/ws/relay/", "/ws/stream/S002/"])
@pytest.mark.parametrize(
    "origin",
    ["http://evil.example", "http://127.0.0.1.evil.example:8000", "null", "file://", "http://10.9.9.9"],
)
def test_a_cross_origin_browser_websocket_is_refused(ws, path, origin):
    from elections.web.origin import REFUSED

    assert ws(path, origin) == (False, REFUSED)


def test_the_stream_needs_an_origin_but_the_relay_takes_non_browser_clients(ws, monkeypatch):
    from elections.web.origin import REFUSED

    assert ws("/ws/stream/S002/", None) == (False, REFUSED)
    # With our own origin the stream's own check answers: not logged in.
    assert ws("/ws/stream/S002/", "http://127.0.0.1:8000") == (False, 4401)

    async def scenario(origin):
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)

        async def address():  # type: ignore[no-untyped-def]
            return server.sockets[0].getsockname()[:2]

        monkeypatch.setattr("relay.ws.relay_address", address)
        from channels.testing import WebsocketCommunicator

        from stkrelay.asgi import application

        headers = [(b"host", b"127.0.0.1:8000")] + ([(b"origin", origin.encode())] if origin else [])
        comm = WebsocketCommunicator(application, "/ws/relay/", headers=headers)
        accepted, _ = await comm.connect(timeout=5)
        await comm.disconnect()
        server.close()
        await server.wait_closed()
        return accepted

    assert asyncio.run(scenario(None)) is True  # a relay client without a browser
    assert asyncio.run(scenario("http://localhost:8000")) is True  # the panel's own page
    assert asyncio.run(scenario("http://evil.example")) is False


# -- X-Forwarded-For ------------------------------------------------------------------------
def _client(remote: str, forwarded: str | None = None, proxies: tuple[str, ...] = ()) -> str:
    from django.test import RequestFactory, override_settings

    from elections.web.auth import client_address

    meta = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    with override_settings(STK_TRUSTED_PROXIES=list(proxies)):
        return client_address(RequestFactory().get("/", **meta))


def test_forwarded_for_is_ignored_from_a_peer_that_is_not_a_trusted_proxy(dj):
    assert _client("192.0.2.66", "203.0.113.9") == "192.0.2.66"
    assert _client("192.0.2.66", "203.0.113.9", proxies=("10.0.0.0/24",)) == "192.0.2.66"


def test_forwarded_for_is_honoured_from_a_trusted_proxy_up_to_the_first_untrusted_hop(dj):
    proxies = ("10.0.0.0/24", "10.0.1.7/32")
    assert _client("10.0.0.5", "203.0.113.9", proxies) == "203.0.113.9 (via 10.0.0.5)"
    # A client's own forged hops on the left are not believed: the nearest untrusted hop wins.
    assert _client("10.0.0.5", "6.6.6.6, 203.0.113.9, 10.0.1.7", proxies) == "203.0.113.9 (via 10.0.0.5)"
    assert _client("10.0.0.5", "garbage, 203.0.113.9", proxies) == "203.0.113.9 (via 10.0.0.5)"
    assert _client("10.0.0.5", "203.0.113.9, garbage", proxies) == "10.0.0.5"
    assert _client("10.0.0.5", None, proxies) == "10.0.0.5"


def test_metrics_through_a_local_proxy_are_not_loopback_for_the_remote_client(dj):
    from django.test import override_settings

    meta = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "192.0.2.66"}
    assert client_for().get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    with override_settings(STK_TRUSTED_PROXIES=["127.0.0.1/32"]):
        assert client_for().get("/metrics", **meta).status_code == 401


# -- CSV ------------------------------------------------------------------------------------
def test_csv_cells_that_a_spreadsheet_would_run_get_a_leading_quote(dj):
    from django.utils import timezone

    from elections.web.panel.views import csv_cell

    for evil in ('=HYPERLINK("http://x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rx"):
        assert csv_cell(evil) == "'" + evil
    for fine in ("S001", "lease expired", "-0.500", "12", 7, None, ""):
        assert csv_cell(fine) == fine
    now = timezone.now()
    event("S001", 1, "elected", 1, now - timedelta(minutes=5), reason="=cmd|' /C calc'!A0")
    event("S002", 1, "elected", 2, now - timedelta(minutes=1), reason="@SUM(1+1)*cmd|' /C calc'!A0")
    response = client_for(make_user("vera")).get("/history.csv", {"kmsn": KMSN})
    assert response.status_code == 200
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    cells = [cell for row in rows[1:] for cell in row]
    assert len(rows) == 3 and not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")], rows
    assert {"'=cmd|' /C calc'!A0", "'@SUM(1+1)*cmd|' /C calc'!A0"} <= set(cells), rows


# -- stkuser: passwords out of argv ----------------------------------------------------------
def _stkuser(*args: str, stdin: str = "") -> tuple[str, str]:
    import sys

    from django.core.management import call_command

    out, err, saved = io.StringIO(), io.StringIO(), sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        call_command("stkuser", *args, stdout=out, stderr=err)
    finally:
        sys.stdin = saved
    return out.getvalue(), err.getvalue()


def test_stkuser_reads_the_password_from_a_file_and_warns_about_argv(dj, tmp_path):
    from django.contrib.auth import authenticate
    from django.core.management.base import CommandError

    secret = tmp_path / "olga.pw"
    secret.write_text("a-long-passphrase\n")
    out, err = _stkuser("add", "olga", "--role", "viewer", "--password-file", str(secret))
    assert out == "created olga (viewer)\n" and err == ""
    assert authenticate(username="olga", password="a-long-passphrase") is not None
    out, err = _stkuser("passwd", "olga", "--password-file", "-", stdin="another-long-phrase\n")
    assert authenticate(username="olga", password="another-long-phrase") is not None and err == ""
    out, err = _stkuser("passwd", "olga", "--password", "third-long-phrase")
    assert "visible to other users" in err
    assert authenticate(username="olga", password="third-long-phrase") is not None
    with pytest.raises(CommandError, match="cannot read --password-file"):
        _stkuser("passwd", "olga", "--password-file", str(tmp_path / "absent"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(CommandError, match="is empty"):
        _stkuser("passwd", "olga", "--password-file", str(tmp_path / "empty"))
