"""The webhook's rules without agents: who sends which row (`notify.sends`), whose role a row
changes (`notify.Roles`), security events coalesced (`notify_feed.SecurityWatch`), and the
queue's file (`notify_outbox.Outbox`: bounded, drop-oldest told, kept across a restart, a bad
file set aside). The agents' side is tests/test_agents_notify*.py."""

import json

import pytest

from elections.runtime.notify import Roles, sends
from elections.runtime.notify_feed import SecurityWatch, recent_of, totals_of
from elections.runtime.notify_outbox import NotifyOutbox


@pytest.mark.parametrize(
    "kind, issuer, led, known, expected",
    [
        ("elected", "S001", False, False, True),  # my own failover: mine to send
        ("elected", "S002", True, True, False),  # another's failover: never mine
        ("station_seen", "S002", True, True, False),
        ("pause_requested", "S002", True, True, True),  # issued elsewhere in the epoch I lead: mine
        ("pause_requested", "S001", False, True, False),  # issued here, another leads its epoch: theirs
        ("drain_requested", "S001", True, True, True),  # issued here, in my own epoch: mine, once
        ("drain_requested", "S001", False, False, True),  # no known leader of its epoch: the issuer's
        ("drain_requested", "S002", False, False, False),  # ...and only the issuer's
        ("audit", "S001", True, True, False),
        ("renew_failed", "S001", True, True, False),
    ],
)  # fmt: skip
def test_one_agent_sends_each_row(kind, issuer, led, known, expected):
    assert sends(kind, issuer, "S001", led, known) is expected


def test_a_drain_of_this_node_from_anywhere_is_a_role_change_and_anothers_election_is_not():
    r = Roles("S001")
    assert r.role == "follower"
    assert r.fold("elected", "S002", {}) is None  # another's election: not my role
    assert r.fold("elected", "S001", {"cause": "expired"}) == "leader"
    assert r.fold("drain_requested", "S001", {"target": "S002"}) is None
    assert r.fold("drain_requested", "S003", {"target": "S001"}) == "draining"  # issued on another member
    assert r.fold("handoff", "S001", {}) is None  # a drained leader hands off: still draining
    assert r.fold("undrain_requested", "S002", {"target": "S001"}) == "follower"
    assert r.fold("stepped_down", "S001", {}) is None
    assert Roles("S001", drained=True).role == "draining"


def test_security_events_are_coalesced_one_at_once_then_one_per_window():
    w = SecurityWatch(every=60)
    assert w.look({"forged": 4}, 0.0) is None  # the counts before the start are the last run's
    assert w.look({"forged": 4}, 1.0) is None  # nothing new
    assert w.look({"forged": 5}, 2.0) == {"forged": 1}  # the first after a quiet spell: at once
    for t in range(3, 60):  # a flood: counted, not posted
        assert w.look({"forged": 5 + 1000 * t, "replayed": t}, float(t)) is None
    out = w.look({"forged": 60_005, "replayed": 60}, 62.0)
    assert out == {"forged": 60_000, "replayed": 60}, out  # every refusal of the window, in one event
    assert w.look({"forged": 60_005, "replayed": 60}, 200.0) is None
    # The worker restarted (its counts start again from 0): what it counts now is new.
    assert w.look({"forged": 2}, 300.0) == {"forged": 2}


def test_refusal_docs_from_a_view_are_read_bounded_and_typed():
    one = {"source": "s", "cause": "forged", "detail": "d", "count": 3, "last_at": "t", "extra": 1}
    doc = {"counts": {"forged": 3, "bad": "x", "neg": -1, "b": True}, "recent": [one] * 9}
    assert totals_of(doc) == {"forged": 3}
    assert len(recent_of(doc)) == 5 and set(recent_of(doc)[0]) == {
        "source",
        "cause",
        "detail",
        "count",
        "last_at",
    }
    assert totals_of("junk") == {} and recent_of({"recent": "x"}) == []


def _doc(i):
    return {"id": f"K/S001/{i}", "kind": "elected", "epoch": i}


def test_the_outbox_is_bounded_drops_the_oldest_and_keeps_its_events_and_cursor_across_a_restart(tmp_path):
    path, dropped = tmp_path / "webhook-outbox.json", []
    box = NotifyOutbox(path, 3, dropped.append)
    box.extend([_doc(1), _doc(2)], cursor=7)
    box.extend([_doc(2)], cursor=8)  # a row offered twice is queued once
    assert len(box) == 2
    box.extend([_doc(3), _doc(4), _doc(5)], cursor=9)
    assert [d["id"] for d in dropped] == ["K/S001/1", "K/S001/2"]
    assert box.head(0)["id"] == "K/S001/3"
    # A restart: the events not yet delivered and the cursor are read back.
    again = NotifyOutbox(path, 3, dropped.append)
    assert (again.cursor, len(again), again.head(0)["id"]) == (9, 3, "K/S001/3")
    again.done("K/S001/3")
    again.done("K/S001/unknown")  # dropped meanwhile: nothing happens
    assert [d["id"] for d in json.loads(path.read_text())["queue"]] == ["K/S001/4", "K/S001/5"]
    assert (
        NotifyOutbox(path, 1, dropped.append).head(0)["id"] == "K/S001/5"
    )  # a smaller WEBHOOK_QUEUE keeps the newest


@pytest.mark.parametrize("body", [b"not json", b'{"queue": "x"}', b'{"queue": [], "cursor": "7"}', b"[1]"])
def test_a_bad_outbox_file_is_set_aside_and_the_queue_starts_empty(tmp_path, body):
    path = tmp_path / "webhook-outbox.json"
    path.write_bytes(body)
    box = NotifyOutbox(path, 10, lambda d: None)
    assert (len(box), box.cursor) == (0, None)
    assert path.with_suffix(".json.bad").read_bytes() == body
    box.extend([_doc(1)], cursor=1)
    assert json.loads(path.read_text())["cursor"] == 1


def test_invalid_events_in_the_file_are_skipped_and_an_oversized_file_is_not_read_whole(tmp_path):
    path = tmp_path / "webhook-outbox.json"
    path.write_text(
        json.dumps({"cursor": 3, "queue": [_doc(1), {"id": 5}, "x", {"id": "", "kind": "k", "epoch": 1}]})
    )
    box = NotifyOutbox(path, 10, lambda d: None)
    assert [d["id"] for d in [box.head(0)]] == ["K/S001/1"] and len(box) == 1
    path.write_bytes(b'{"cursor": 1, "queue": [' + b" " * (3 * 16 * 1024) + b"]}")
    assert len(NotifyOutbox(path, 1, lambda d: None)) == 0  # cut at its bound: not JSON, set aside
