"""Where the leader's relay listens (relay.server.listen_set), as the site page and the
API show it from the relay's own relay.json; a damaged list is no address."""

from __future__ import annotations

import json

import pytest
import test_panel_support
from test_panel_support import KMSN, client_for, make_user, write_leading, write_pool, write_relay

SITE = f"/sites/{KMSN}/"
dj = test_panel_support.dj  # the fixture, under its name here

LISTEN = [
    {"address": "192.168.1.10", "why": "node", "state": "listening", "for_s": 9.0, "error": ""},
    {
        "address": "127.0.0.1",
        "why": "loopback",
        "state": "failed",
        "for_s": 9.0,
        "error": "Address already in use",
    },
    {"address": "192.168.1.250", "why": "vip", "state": "listening", "for_s": 2.0, "error": ""},
]


def test_the_site_page_and_the_api_say_where_the_relay_listens_and_what_it_cannot_bind(dj):
    c = client_for(make_user("vera"))  # first: a password hash on a loaded machine takes seconds
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], {"connections": 0, "listen": LISTEN})  # stale after 3 s
    page = c.get(SITE).content.decode()
    assert "Listening on <code>192.168.1.10</code> (node)" in page
    assert "<code>192.168.1.250</code> (vip)" in page
    assert "<code>127.0.0.1</code> (loopback): failed, Address already in use" in page
    relay = json.loads(c.get(f"/api/v1/sites/{KMSN}").content)["relay"]
    assert relay["listen"] == [
        {"address": "192.168.1.10", "why": "node", "state": "listening", "error": None},
        {"address": "127.0.0.1", "why": "loopback", "state": "failed", "error": "Address already in use"},
        {"address": "192.168.1.250", "why": "vip", "state": "listening", "error": None},
    ]


@pytest.mark.parametrize(
    "listen", [7, "x", [7, None, ["a"]], [{"address": 5}], [{"why": "vip"}], [{"address": "<b>x</b>"}] * 100]
)
def test_a_damaged_listen_list_shows_no_address_and_never_a_500(dj, listen):
    c = client_for(make_user("vera"))
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], {"connections": 0, "listen": listen})
    response = c.get(SITE)
    assert response.status_code == 200 and "<b>x</b>" not in response.content.decode()
    relay = json.loads(c.get(f"/api/v1/sites/{KMSN}").content)["relay"]
    assert relay["running"] is True  # the rest of relay.json was read: only the list was refused
    assert len(relay["listen"]) <= 32 and all(isinstance(e["address"], str) for e in relay["listen"])
