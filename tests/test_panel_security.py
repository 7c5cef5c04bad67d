"""Nothing from the LAN is trusted: Host headers, WebSocket origins, X-Forwarded-For,
CSV cells a spreadsheet would run, and passwords kept out of argv."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
from datetime import timedelta

import pytest
import test_panel_support
from test_panel_support import KMSN, TOKEN, client_for, event, make_user

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
    from stkconfig.web import allowed_hosts

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

        monkeypatch.setattr("relay.web.ws.relay_address", address)
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


def test_stkuser_reads_the_password_from_a_file_stdin_or_the_environment_never_argv(
    dj, tmp_path, monkeypatch
):
    from django.contrib.auth import authenticate
    from django.core.management.base import CommandError

    secret = tmp_path / "olga.pw"
    secret.write_text("a-long-passphrase\n")
    out, err = _stkuser("add", "olga", "--role", "viewer", "--password-file", str(secret))
    assert out == "created olga (viewer)\n" and err == ""
    assert authenticate(username="olga", password="a-long-passphrase") is not None
    out, err = _stkuser("passwd", "olga", "--password-file", "-", stdin="another-long-phrase\n")
    assert authenticate(username="olga", password="another-long-phrase") is not None and err == ""
    monkeypatch.setenv("STK_USER_PASSWORD", "the-environments-phrase")
    _stkuser("passwd", "olga")
    assert authenticate(username="olga", password="the-environments-phrase") is not None
    with pytest.raises(SystemExit) as refused:
        _stkuser("passwd", "olga", "--password", "third-long-phrase")
    assert refused.value.code == 2
    assert authenticate(username="olga", password="third-long-phrase") is None  # refused, not used
    with pytest.raises(CommandError, match="cannot read --password-file"):
        _stkuser("passwd", "olga", "--password-file", str(tmp_path / "absent"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(CommandError, match="is empty"):
        _stkuser("passwd", "olga", "--password-file", str(tmp_path / "empty"))


def test_stkuser_refuses_a_password_on_the_command_line_with_one_line_naming_the_alternatives(dj):
    import subprocess
    import sys

    from harness import ROOT

    argv = [sys.executable, str(ROOT / "manage.py"), "stkuser", "add", "olga", "--role", "viewer"]
    argv += ["--password", "a-long-passphrase"]
    env = dict(os.environ, STK_KMSN=KMSN, STK_STATION="S001", STK_RELAY_TOKEN=TOKEN,
               STK_LEASE_DIR=str(dj["lease_dir"]), STK_DATA_DIR=str(dj["data_dir"]))  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert (
        "--password is no longer accepted" in line
        and "--password-file" in line
        and "STK_USER_PASSWORD" in line
    )


# -- terminal injection: every command prints outside text escaped -------------------------
HOSTILE = "\x1b[31mred\x1b[0m\r\x9b2J\u202egnp.exe\nFAKE ok"  # CSI, CR, 8-bit CSI, bidi, a forged line
SHOWN = "\\u001b[31mred\\u001b[0m\\u000d\\u009b2J\\u202egnp.exe\\u000aFAKE ok"


def _command(name: str, *args: str) -> tuple[str, str]:
    from django.core.management import call_command

    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=err)
    except SystemExit:
        pass
    return out.getvalue(), err.getvalue()


def _clean(text: str) -> None:
    from elections.core.terminal import UNSAFE

    for line in text.splitlines():
        assert not UNSAFE.search(line.replace("\t", " ")), repr(line)  # a tab: the command's own column


def test_relayctl_history_list_and_doctor_print_reasons_and_names_from_outside_escaped(dj):
    from datetime import UTC, datetime

    from test_panel_support import member, write_pool

    event("S002", 1, "stepped_down", 7, datetime(2026, 6, 15, tzinfo=UTC), reason=HOSTILE)
    refusal = {"source": f"events/{HOSTILE}.jsonl", "cause": "forged", "detail": HOSTILE, "count": 2,
               "last_at": "2026-06-15T20:30:15"}  # fmt: skip
    write_pool(dj["data_dir"], members={"S001": member(), "S002": member(eligible=False, reasons=[HOSTILE])},
               refusals={"counts": {"forged": 2}, "recent": [refusal]})  # fmt: skip
    for args in (("history",), ("list",), ("doctor",)):
        out, err = _command("relayctl", *args)
        _clean(out + err)
        assert SHOWN in out, (args, out)
    history, _ = _command("relayctl", "history")
    assert len(history.splitlines()) == 2  # the header and the one row: the reason's newline forged no line
    as_json, _ = _command("relayctl", "history", "--json")
    assert json.loads(as_json)[0]["reason"] == HOSTILE  # escaped on the terminal, the same JSON value


def test_stkuser_list_prints_names_and_states_escaped(dj):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user(username=f"eve{HOSTILE}")
    out, _ = _command("stkuser", "list")
    _clean(out)
    assert f"eve{SHOWN}\t" in out


def test_the_one_escape_keeps_text_readable_and_json_valid():
    from elections.core.terminal import terminal_safe

    assert terminal_safe("S002 stepped down: drain (olga, 192.0.2.9) — Größe 7") == (
        "S002 stepped down: drain (olga, 192.0.2.9) — Größe 7"
    )
    assert terminal_safe(HOSTILE) == SHOWN
    assert (
        terminal_safe("\udcff\u2066\u2069\u061c\u200f\u2028\x7f")
        == "\\udcff\\u2066\\u2069\\u061c\\u200f\\u2028\\u007f"
    )
    doc = {"reason": HOSTILE, "node": "S\u00e9"}
    assert json.loads(terminal_safe(json.dumps(doc, ensure_ascii=False))) == doc


def test_the_panel_shows_markup_from_outside_as_text(dj):
    from datetime import UTC, datetime

    from test_panel_support import member, write_pool

    markup = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    now = datetime.now(UTC)
    event("S002", 1, "elected", 7, now - timedelta(minutes=5), reason=markup, actor=markup)
    write_pool(dj["data_dir"], members={"S001": member(), "S002": member(eligible=False, reasons=[markup])})
    viewer = client_for(make_user("vera", "viewer"))
    for url in ("/history/", f"/sites/{KMSN}/", "/"):
        page = viewer.get(url).content.decode()
        assert "<script>alert(2)" not in page and "<img src=x" not in page, url
    assert "&lt;script&gt;alert(2)" in viewer.get("/history/").content.decode()


def test_only_our_own_rendered_html_is_marked_safe():
    """Django escapes every variable; `mark_safe`/`|safe` may wrap only HTML we rendered
    (a template's output in live.py, the SVG timeline, whose texts svg.py escapes), never
    outside text. A new use must be looked at, then counted here."""
    import re
    from collections import Counter

    from harness import ROOT

    uses = Counter(
        str(path.relative_to(ROOT))
        for folder in ("elections", "relay", "stkrelay", "templates")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".html")
        for line in path.read_text().splitlines()
        if re.search(r"mark_safe\(|\|\s*safe\b|{% autoescape off", line)
    )
    assert uses == {"elections/web/panel/live.py": 2, "elections/web/panel/views.py": 1}, uses
