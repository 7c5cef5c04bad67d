"""Retiring a member from the panel (Django's test client; pool views written as the
worker writes them, the member records real signed files on the test's share):
the Forget button is offered only for a member whose heartbeat is stale and that
does not hold the lease, behind the operator role; the confirmation wants the
name typed; the command is audited, written as a pool event carrying the
member's epoch claim, and removes its record; fresh members and the leader are
refused (422), a viewer is refused (403), and each refusal is audited."""

from __future__ import annotations

import json
import re

import test_panel_support
from test_panel_support import KMSN, TOKEN, client_for, make_user, member, write_pool

from elections.core.commands import REFUSED, check_command, forget_refusal
from elections.core.lease import sign

SITE = f"/sites/{KMSN}/"
dj = test_panel_support.dj
STALE_AFTER = 3 + 5  # the panel's settings: HEARTBEAT_TTL = LEASE_TTL = 3, PROMOTION_HOLD = 5


def text(response) -> str:  # type: ignore[no-untyped-def]
    return re.sub(r"\s+", " ", response.content.decode())


def a_pool(dj, **ages):  # type: ignore[no-untyped-def]
    members = {
        n: member(age=ages.get(n, 0.4), ip=f"127.0.0.2{n[-1]}", epoch=7) for n in ("S001", "S002", "S003")
    }
    members["S003"]["epoch"] = 9  # its last claim: higher than the lease's
    write_pool(dj["data_dir"], leader="S001", epoch=7, members=members)
    folder = dj["lease_dir"] / "members"
    folder.mkdir(exist_ok=True)
    for node in members:
        doc = {"node": node, "ip": "127.0.0.1", "seq": 5, "epoch": 7}
        (folder / f"{node}.json").write_text(json.dumps({**doc, "sig": sign(doc, TOKEN)}))
    return folder


def events(dj, kind):  # type: ignore[no-untyped-def]
    from elections.ports.events.eventlog import read_events

    return [e for e in read_events(dj["lease_dir"] / "events" / "S001.jsonl") if e["kind"] == kind]


def test_the_forget_button_is_offered_only_for_a_stale_member_that_does_not_lead(dj):
    a_pool(dj, S003=100.0)
    page = text(client_for(make_user("olga", "operator")).get(SITE))
    assert f'href="{SITE}forget/?epoch=7&amp;target=S003"' in page
    # Not offered at all where it cannot be used (issue 42 finding 5): no disabled button and its why.
    assert "forget/?epoch=7&amp;target=S002" not in page and "heartbeat is fresh" not in page
    assert "forget/?epoch=7&amp;target=S001" not in page and "holds the lease" not in page
    viewer = text(client_for(make_user("vera", "viewer")).get(SITE))
    assert "forget/?" not in viewer and "needs the operator role" in viewer


def test_forgetting_a_stale_member_is_audited_removes_its_record_and_keeps_its_epoch(dj):
    from elections.audit import AuditEntry

    folder = a_pool(dj, S003=100.0)
    c = client_for(make_user("olga", "operator"), REMOTE_ADDR="192.0.2.50")
    page = text(c.get(f"{SITE}forget/?target=S003&epoch=7"))
    assert "Forget S003: a member gone for good" in page and "Type the name of the member to forget" in page
    typo = c.post(f"{SITE}forget/", {"target": "S003", "expected_epoch": "7", "confirm_name": "S002"})
    assert typo.status_code == 422 and (folder / "S003.json").exists()
    response = c.post(f"{SITE}forget/", {"target": "S003", "expected_epoch": "7", "confirm_name": "S003",
                                         "reason": "decommissioned"})  # fmt: skip
    assert response.status_code == 302
    assert not (folder / "S003.json").exists() and (folder / "S002.json").exists()
    (forget,) = events(dj, "forget_requested")
    assert (forget["target"], forget["actor"], forget["client"], forget["epoch"]) == (
        "S003",
        "olga",
        "192.0.2.50",
        9,
    )
    rows = AuditEntry.objects.filter(action="forget", correlation=forget["correlation"]).order_by("seq")
    assert [(r.phase, r.user, r.target) for r in rows] == [
        ("intent", "olga", "S003"),
        ("outcome", "olga", "S003"),
    ]
    assert rows[1].result == "accepted" and rows[1].reason == "decommissioned"
    assert "waiting for this agent" in text(c.get(response["Location"]))
    members = json.loads((dj["data_dir"] / "pool.json").read_text())["members"]
    del members["S003"]  # the worker's next survey no longer lists it
    write_pool(dj["data_dir"], leader="S001", epoch=7, members=members)
    assert "S003 is no longer a member; its history is kept" in text(c.get(response["Location"]))


def test_a_fresh_member_or_the_leader_is_refused_and_the_refusal_audited(dj):
    from elections.audit import AuditEntry

    folder = a_pool(dj, S001=100.0)  # the leader's heartbeat looks stale here: it still holds the lease
    c = client_for(make_user("olga", "operator"))
    for node, why in (("S002", "heartbeat is fresh"), ("S001", "holds the lease")):
        response = c.post(f"{SITE}forget/", {"target": node, "expected_epoch": "7", "confirm_name": node})
        assert response.status_code == 422 and why in text(response)
        assert (folder / f"{node}.json").exists()
    assert not events(dj, "forget_requested")
    outcomes = AuditEntry.objects.filter(action="forget", phase="outcome")
    assert sorted((r.target, r.result) for r in outcomes) == [("S001", "refused"), ("S002", "refused")]


def test_a_viewer_cannot_forget_and_is_audited(dj):
    from elections.audit import AuditEntry

    folder = a_pool(dj, S003=100.0)
    response = client_for(make_user("vera", "viewer")).post(
        f"{SITE}forget/", {"target": "S003", "expected_epoch": "7", "confirm_name": "S003"}
    )
    assert response.status_code == 403 and (folder / "S003.json").exists()
    assert AuditEntry.objects.get(action="forget", phase="outcome").result == "forbidden"


def test_forget_refused_without_a_reachable_store_or_knowing_when_a_heartbeat_is_stale(dj):
    a_pool(dj, S003=100.0)
    doc = json.loads((dj["data_dir"] / "pool.json").read_text())
    (dj["data_dir"] / "pool.json").write_text(json.dumps({**doc, "store_reachable": False}))
    response = client_for(make_user("olga", "operator")).post(
        f"{SITE}forget/", {"target": "S003", "expected_epoch": "7", "confirm_name": "S003"}
    )
    assert response.status_code == 503 and "cannot be told from a gone one" in text(response)


class _Member:
    def __init__(self, age):  # type: ignore[no-untyped-def]
        self.eligible, self.reasons, self.age, self.epoch = False, (), age, 1


class _Pool:
    def __init__(self, members, lease=None):  # type: ignore[no-untyped-def]
        self.members, self.lease = members, lease

    @property
    def epoch(self):  # type: ignore[no-untyped-def]
        return (self.lease or {}).get("epoch")


def test_the_forget_check_is_pure_and_names_each_refusal():
    lease = {"node": "S001", "epoch": 4, "released": False}
    pool = _Pool(
        {"S001": _Member(50.0), "S002": _Member(8.0), "S003": _Member(8.1), "S004": _Member(None)}, lease
    )
    assert check_command(pool, "forget", "S003", None, False, 8.0)[0] == "accepted"
    why = (
        "S002 cannot be forgotten: S002's heartbeat is fresh (8.0 s old, stale after 8 s): "
        "stop its agent first"
    )
    assert check_command(pool, "forget", "S002", None, False, 8.0) == (REFUSED, why)
    assert "has not been timed yet" in check_command(pool, "forget", "S004", None, False, 8.0)[1]
    assert "holds the lease (epoch 4)" in check_command(pool, "forget", "S001", None, False, 8.0)[1]
    assert check_command(pool, "forget", "S009", None, False, 8.0)[0] == "unknown_member"
    assert check_command(pool, "forget", None, None, False, 8.0)[0] == REFUSED
    assert "does not know when a heartbeat is stale" in check_command(pool, "forget", "S003", None, False)[1]
    assert forget_refusal("S001", _Member(50.0), {**lease, "released": True}, 8.0) == ""  # a released lease
