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


