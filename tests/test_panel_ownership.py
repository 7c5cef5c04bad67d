"""The ownership map on the panel's site page, in the API and on /metrics, with an
alarm per non-ok verdict (from this agent's pool.json, as its watch writes it)."""

from __future__ import annotations

import json
import time

import test_panel_support
from test_metrics import samples, scrape
from test_panel_support import KMSN, client_for, make_user, write_pool

dj = test_panel_support.dj  # the fixture, under its name here
VIP = "192.0.2.100"
STRANGER = "02:00:00:00:00:99"


def ownership(*entries, repairs=()):
    return {"at": time.monotonic() - 1.5, "every": 2.0, "entries": list(entries), "repairs": list(repairs)}


def entry(verdict, holders=(), foreign=(), address=VIP, executor="vip", errors=()):
    return {"executor": executor, "address": address, "verdict": verdict, "expected": "S001", "epoch": 7,
            "holders": list(holders), "foreign": list(foreign), "errors": list(errors)}  # fmt: skip


def test_a_drifted_and_a_conflicting_address_show_everywhere_with_their_alarms(dj):
    repair = {"executor": "vip", "address": VIP, "verb": "assign_vip", "cause": "drift", "epoch": 7,
              "status": "applied", "message": "192.0.2.100/24 added to eth0",
              "at": time.monotonic() - 3}  # fmt: skip
    write_pool(dj["data_dir"], leader="S001", epoch=7, ownership=ownership(
        entry("drift", ["S002"]),
        entry("conflict", ["S001"], [STRANGER], address="192.0.2.50", executor="aws"),
        repairs=[repair]))  # fmt: skip
    c = client_for(make_user("vera"))

    site = json.loads(c.get(f"/api/v1/sites/{KMSN}").content)
    assert site["alarms"][-2:] == ["address_conflict", "address_drift"]
    got = {
        (a["address"], a["verdict"], tuple(a["holders"]), tuple(a["foreign"]))
        for a in site["addresses"]["addresses"]
    }
    assert got == {(VIP, "drift", ("S002",), ()), ("192.0.2.50", "conflict", ("S001",), (STRANGER,))}
    assert 1.0 <= site["addresses"]["observed_ago_s"] < 10
    only = json.loads(c.get(f"/api/v1/sites/{KMSN}/addresses").content)
    assert only["addresses"] == site["addresses"]["addresses"] and only["repairs"][0]["cause"] == "drift"

    _, families = scrape()
    verdicts = samples(families, "stkrelay_address_verdict")
    key = (("address", VIP), ("executor", "vip"), ("kmsn", KMSN))
    assert verdicts[(*key[:2], key[2], ("verdict", "drift"))] == 1
    assert verdicts[(*key[:2], key[2], ("verdict", "ok"))] == 0

    page = c.get(f"/sites/{KMSN}/").content.decode()
    assert f'data-address="{VIP}" data-verdict="drift"' in page
    assert "drift: on the wrong member" in page and "conflict: on two or more hosts" in page
    assert STRANGER in page and "(no member)" in page
    assert "assign_vip 192.0.2.100 (drift, epoch 7)" in page
    sites = c.get("/").content.decode()
    assert 'data-alarm-code="address_drift"' in sites and 'data-alarm-code="address_conflict"' in sites


def test_an_ok_map_raises_no_alarm_and_junk_entries_are_skipped(dj):
    write_pool(dj["data_dir"], leader="S001", epoch=7, ownership=ownership(
        entry("ok", ["S001"]), {"verdict": "fine"}, "junk", {"verdict": "ok", "address": 7}))  # fmt: skip
    c = client_for(make_user("vera"))
    site = json.loads(c.get(f"/api/v1/sites/{KMSN}").content)
    assert not [a for a in site["alarms"] if a.startswith("address_")]
    assert [a["verdict"] for a in site["addresses"]["addresses"]] == ["ok"]


def test_without_a_map_the_page_says_why_and_the_api_lists_nothing(dj):
    write_pool(dj["data_dir"], leader="S001", epoch=7)
    c = client_for(make_user("vera"))
    assert json.loads(c.get(f"/api/v1/sites/{KMSN}/addresses").content)["addresses"] == []
    assert "No address follows the leader on this agent" in c.get(f"/sites/{KMSN}/").content.decode()
