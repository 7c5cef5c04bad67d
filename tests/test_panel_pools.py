"""Watched pools on the panel and the API (docs/design.md §11): this agent's own pool
(pool.json as its worker writes it) beside two simulated watched pools on their
own directories with their own keys, read by real `PoolWatcher`s whose events
are projected into the test's database; and the fleet view's order."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
import test_panel_support
from poolsim import SimPool
from test_panel_support import KMSN, TOKEN, client_for, make_user, write_pool

from elections.core.lease import signature_ok
from elections.ports.local.localstate import LocalState
from elections.runtime.watch import PoolWatcher
from stkconfig.parsed import WatchedPool
from stkhost.clock import SystemClock

dj = test_panel_support.dj
A, B = "1111-1111-11-11", "2222-2222-22-22"
KEY_A, KEY_B = "site-a-key-0123456789abc", "site-b-key-9876543210xyz"


def text(response) -> str:  # type: ignore[no-untyped-def]
    return re.sub(r"\s+", " ", response.content.decode())


class Inline:
    """A projector that inserts at once, in the test's transaction (the real `ingest`)."""

    def submit(self, events, timeout=1.0, kmsn=None):  # type: ignore[no-untyped-def]
        from elections.runtime.projection import ingest

        ingest(kmsn, events)
        return True


@pytest.fixture
def pools(dj, tmp_path):
    """Own pool led by S002 at epoch 7; A led by S003 at epoch 2; B led by S001 at epoch 1."""
    from django.conf import settings

    saved = stk = settings.STK
    sims = {A: SimPool(tmp_path / "a" / "socket", A, KEY_A, members=3),
            B: SimPool(tmp_path / "b" / "socket", B, KEY_B, members=10)}  # fmt: skip
    sims[A].elect("S001")
    sims[A].elect("S003", reason="lease expired")
    sims[B].elect("S001")
    for sim in sims.values():
        sim.beat_all()
    watched = [WatchedPool(k, str(s.dir), s.key, s.key, 1.0, "OFFICE1") for k, s in sims.items()]
    settings.STK = stk = dataclasses.replace(stk, watched=watched)  # Config is frozen
    shutil.rmtree(dj["data_dir"] / "watched", ignore_errors=True)
    local = LocalState(dj["data_dir"])
    watchers = {
        w.kmsn: PoolWatcher(w, "S001", SystemClock(), local, Inline(), 3.0, 1.0, 3.0) for w in stk.watched
    }
    write_pool(dj["data_dir"], leader="S002", epoch=7)

    def look() -> None:
        for w in watchers.values():
            w.look()

    look()
    try:
        yield sims, look
    finally:
        settings.STK = saved


def test_every_page_and_the_api_show_the_own_pool_and_the_watched_ones(pools):
    _sims, _ = pools
    c = client_for(make_user("vera"))
    sites = {s["kmsn"]: s for s in json.loads(c.get("/api/v1/sites").content)["sites"]}
    assert {k: (s["leader"], s["epoch"], s["watched"]) for k, s in sites.items()} == {
        KMSN: ("S002", 7, False), A: ("S003", 2, True), B: ("S001", 1, True),
    }  # fmt: skip
    assert (sites[B]["members_eligible"], sites[B]["members_total"]) == (10, 10)
    assert sites[A]["leader_changes_24h"] == 2 and sites[A]["alarms"] == []
    page = text(c.get("/"))
    for kmsn, leader in ((KMSN, "S002"), (A, "S003"), (B, "S001")):
        row = re.search(rf'<tr class="[^"]*" data-kmsn="{kmsn}">(.*?)</tr>', page).group(1)  # type: ignore[union-attr]
        assert f'<strong class="leader">{leader}</strong>' in row
    site = text(c.get(f"/sites/{A}/"))
    assert 'data-leader="S003"' in site and 'data-epoch="2"' in site and "watched" in site
    assert json.loads(c.get(f"/api/v1/sites/{A}/members").content)["epoch"] == 2
    assert json.loads(c.get(f"/api/v1/sites/{B}/lease").content)["record"]["node"] == "S001"
    history = json.loads(c.get(f"/api/v1/history?kmsn={A}&period=all").content)
    assert [(f["kmsn"], f["epoch"], f["to"]) for f in history["failovers"]] == [
        (A, 2, "S003"),
        (A, 1, "S001"),
    ]
    assert A in text(c.get(f"/history/?kmsn={A}&period=all")) and "S003" in text(c.get(f"/history/?kmsn={A}"))
    assert f'<option value="{B}"' in text(c.get("/audit/"))
    assert json.loads(c.get(f"/api/v1/leader?kmsn={A}").content)["leader"] == "S003"
    assert json.loads(c.get("/api/v1/sites?kmsn=2222").content)["sites"][0]["kmsn"] == B


def test_history_rows_of_members_with_the_same_name_in_two_pools_are_both_kept(pools):
    from elections.models import ElectionEvent

    rows = ElectionEvent.objects.filter(node="S001", seq=1).values_list("kmsn", flat=True)
    assert sorted(rows) == [A, B]  # unique on (kmsn, node, seq), not (node, seq)


def test_the_fleet_view_puts_the_pool_without_a_leader_first_and_sorts_any_column(pools):
    sims, look = pools
    sims[A].dir.rename(sims[A].dir.with_name("gone"))  # A's share goes away
    look()
    c = client_for(make_user("vera"))
    order = re.findall(r'<tr class="[^"]*" data-kmsn="([^"]+)"', text(c.get("/")))
    assert order[0] == A and sorted(order) == sorted([KMSN, A, B])
    page = text(c.get("/"))
    assert "<title>⚠ NO LEADER · Sites" in page and 'data-alarm-code="unreachable"' in page
    assert "the watched share is unreachable from this agent" in page
    assert re.findall(r'data-kmsn="([^"]+)"', text(c.get("/?sort=kmsn&dir=asc")))[:3] == sorted([KMSN, A, B])
    assert re.findall(r'data-kmsn="([^"]+)"', text(c.get("/?sort=epoch")))[:2] == [KMSN, B]  # 7, 1; A: none
    assert re.findall(r'<tr class="[^"]*" data-kmsn="([^"]+)"', text(c.get("/?kmsn=2222"))) == [B]
    (s,) = [s for s in json.loads(c.get("/api/v1/sites?sort=worst").content)["sites"][:1]]
    assert s["kmsn"] == A and s["alarms"][:2] == ["no_leader", "unreachable"] and not s["store_reachable"]


def test_a_forged_record_in_a_watched_pool_is_refused_counted_and_shown(pools):
    sims, look = pools
    sims[B].forge_lease("S999", epoch=50)
    sims[B].forge_event("S002", target="S001")
    look()
    c = client_for(make_user("vera"))
    (b,) = [s for s in json.loads(c.get("/api/v1/sites").content)["sites"] if s["kmsn"] == B]
    assert (b["leader"], b["epoch"]) == ("S001", 1)  # the forgery is no evidence
    assert b["security_alarm"] and b["refused_records"] == 2 and "security" in b["alarms"]
    assert "<title>⚠ SECURITY · Sites" in text(c.get("/"))
    site = text(c.get(f"/sites/{B}/"))
    assert 'id="security-banner"' in site and "events/S002.jsonl" in site
    metrics = c.get("/metrics").content.decode()
    assert f'stkrelay_security_events_total{{cause="forged",kmsn="{B}"}} 2.0' in metrics


def test_a_drain_in_a_watched_pool_is_that_pools_signed_command_event_and_audited(pools):
    from elections.audit import AuditEntry
    from elections.ports.events.eventlog import read_events

    sims, _ = pools
    c = client_for(make_user("olga", "operator"))
    response = c.post(f"/api/v1/sites/{A}/drain", json.dumps({"target": "S001", "expected_epoch": 2,
                      "reason": "disk swap"}), content_type="application/json")  # fmt: skip
    assert response.status_code == 202, response.content
    (line,) = read_events(sims[A].dir / "events" / "OFFICE1.jsonl")
    assert (line["kind"], line["target"], line["epoch"], line["actor"]) == (
        "drain_requested",
        "S001",
        2,
        "olga",
    )
    assert signature_ok(line, KEY_A) and not signature_ok(line, TOKEN)  # that pool's key, not ours
    assert not (test_panel_support.django_env()["lease_dir"] / "events" / "OFFICE1.jsonl").exists()
    rows = AuditEntry.objects.filter(correlation=json.loads(response.content)["correlation"])
    assert sorted((r.phase, r.kmsn, r.result) for r in rows) == [
        ("intent", A, ""),
        ("outcome", A, "accepted"),
    ]
    audit = json.loads(c.get(f"/api/v1/audit?kmsn={A}").content)
    assert [(a["kmsn"], a["action"], a["target"]) for a in audit["actions"]] == [(A, "drain", "S001")]
    stale = c.post(f"/api/v1/sites/{A}/drain", json.dumps({"target": "S002", "expected_epoch": 7}),
                   content_type="application/json")  # fmt: skip
    assert stale.status_code == 409  # checked against that pool's epoch (2), not ours (7)


def test_a_command_in_a_watched_pool_whose_member_has_this_agents_name_is_refused(pools):
    from django.conf import settings

    sims, _look = pools
    settings.STK.watched[1] = WatchedPool(
        B, str(sims[B].dir), KEY_B, KEY_B, 1.0, "S003"
    )  # S003 is B's member
    c = client_for(make_user("olga", "operator"))
    response = c.post(f"/api/v1/sites/{B}/pause", json.dumps({}), content_type="application/json")
    assert response.status_code == 503 and "set NODE in [pool:" in json.loads(response.content)["message"]
    assert not (sims[B].dir / "events" / "S003.jsonl").exists()  # S003's own file: never written by us


def test_the_confirmation_of_a_promote_in_a_watched_pool_shows_no_plan_of_this_agents_actions(pools):
    c = client_for(make_user("olga", "operator"))
    page = text(c.get(f"/sites/{A}/promote/?target=S002&epoch=2"))
    assert "S002 takes epoch 3" in page and "This agent only watches pool" in page
    assert 'class="plan"' not in page
