"""The site page and the API say when old stations are on, and how many legacy sessions (issue 19)."""

from __future__ import annotations

import json

import test_panel_support
from test_panel_support import KMSN, client_for, make_user, write_leading, write_pool, write_relay

dj = test_panel_support.dj
SITE = f"/sites/{KMSN}/"


def snapshot(legacy: dict) -> dict:
    client = {"kmsn": KMSN, "station": "S002", "role": "agent", "key": "token", "legacy": True}
    return {"counts": {KMSN: {"S002": {"agent": 1}}}, "relayed": {}, "drops": {}, "legacy": legacy,
            "clients": [client]}  # fmt: skip


def test_the_site_page_warns_while_legacy_is_on_with_its_sessions_and_refusals(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    legacy = {"enabled": True, "sessions": 2, "registered": 5, "refused": {"bad_auth": 3, "wrong_kmsn": 1}}
    write_relay(dj["data_dir"], snapshot(legacy))
    page = client_for(make_user("vera")).get(SITE).content.decode()
    assert 'id="legacy-stations"' in page
    assert "2 legacy sessions now" in page and "5 registered and 4 refused" in page
    assert "bad_auth: 3, wrong_kmsn: 1" in page and "in clear on the LAN" in page


def test_no_banner_while_legacy_is_off_and_hostile_values_are_not_trusted(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], snapshot({"enabled": False}))
    viewer = client_for(make_user("vera"))
    page = viewer.get(SITE).content.decode()
    assert 'id="legacy-stations"' not in page
    junk = {"enabled": True, "sessions": "<script>", "registered": True, "refused": {"<b>x</b>": "many"}}
    write_relay(dj["data_dir"], snapshot(junk))
    page = viewer.get(SITE).content.decode()
    assert "0 legacy sessions now" in page and "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;: 0" in page


def test_the_api_carries_the_legacy_counts(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], snapshot({"enabled": True, "sessions": 1, "registered": 1, "refused": {}}))
    from elections.web.api import relay
    from elections.web.panel.state import site_state

    doc = relay(site_state(KMSN))
    assert json.loads(json.dumps(doc))["legacy"] == {"sessions": 1, "registered": 1, "refused": {}}
