"""Eligibility (pure) and the pool's event tail and command folding (real files)."""

import json

from elections.core.commands import PoolCommands
from elections.core.eligibility import Freshness, judge, observe
from elections.ports.events.eventlog import EventTail

TTL, HOLD = 10.0, 5.0


def beat(seq, **kw):
    return {"node": "S002", "seq": seq, "drain": False, "health": "ok", "priority": 50, **kw}


def test_a_silent_member_stays_eligible_until_ttl_plus_hold_and_says_by_how_much():
    fresh = observe(Freshness(), 1, now=100.0)
    assert judge("S002", beat(1), fresh, 100.0 + TTL, TTL, HOLD).eligible  # past the TTL: held
    assert judge("S002", beat(1), fresh, 100.0 + TTL + HOLD, TTL, HOLD).eligible
    v = judge("S002", beat(1), fresh, 115.3, TTL, HOLD)
    assert not v.eligible and v.reasons == ("heartbeat 15.3 s old > 10 + 5",)


def test_flapping_heartbeats_do_not_flap_eligibility():
    fresh, now, verdicts = observe(Freshness(), 0, 0.0), 0.0, []
    for seq, gap in enumerate([3, 12, 2, 14, 1, 13, 3] * 5, start=1):  # late, but within ttl + hold
        now += gap
        verdicts.append(judge("S002", beat(seq), fresh, now - 0.01, TTL, HOLD).eligible)
        fresh = observe(fresh, seq, now)
    assert all(verdicts)


def test_a_members_own_clock_is_never_read():
    fresh = observe(Freshness(), 7, now=50.0)
    for claimed in ("1970-01-01T00:00:00", "2999-01-01T00:00:00"):
        assert judge("S002", beat(7, at=claimed, updated=-1e12), fresh, 51.0, TTL, HOLD).eligible


def test_drain_health_priority_and_gate_each_name_themselves():
    fresh = observe(Freshness(), 1, now=0.0)
    v = judge("S002", beat(1, drain=True, health="disk full", priority=0), fresh, 1.0, TTL, HOLD, gate=False)
    assert not v.eligible
    assert v.reasons == (
        "drained",
        "health: disk full",
        "priority 0 (never leader)",
        "gate signal: not master",
    )
    assert str(judge("S002", None, Freshness(), 0.0, TTL, HOLD)) == "no heartbeat ever seen"


def test_the_tail_skips_a_torn_last_line_and_picks_it_up_once_complete(tmp_path):
    path = tmp_path / "S001.jsonl"
    line1 = json.dumps({"node": "S001", "seq": 1, "kind": "elected", "epoch": 1}) + "\n"
    line2 = json.dumps({"node": "S001", "seq": 2, "kind": "drain_requested", "epoch": 1, "target": "S002"})
    path.write_text(line1 + line2[:20])  # the writer died mid-append
    tail = EventTail(tmp_path)
    assert [e["seq"] for e in tail.new_events()] == [1]
    assert tail.new_events() == []
    path.write_text(line1 + line2 + "\n")
    assert [e["seq"] for e in tail.new_events()] == [2]
    assert tail.new_events() == []  # nothing twice


def test_commands_fold_into_drains_pause_and_promotes():
    cmds = PoolCommands()
    at = "2026-01-01T00:00:0"
    cmds.apply([
        {"node": "S001", "seq": 1, "at": f"{at}1", "kind": "drain_requested", "target": "S002"},
        {"node": "S003", "seq": 1, "at": f"{at}2", "kind": "pause_requested"},
        {"node": "S001", "seq": 2, "at": f"{at}3", "kind": "undrain_requested", "target": "S002"},
        {"node": "S001", "seq": 3, "at": f"{at}4", "kind": "promote_requested", "target": "S003",
         "epoch": 7, "expected_epoch": 7},
    ])  # fmt: skip
    assert cmds.drained == {"S002": False} and cmds.paused
    assert cmds.promote_at(7) == "S003" and cmds.promote_at(8) is None


def test_a_writer_restarting_after_a_torn_line_loses_nothing(tmp_path):
    from elections.ports.events.eventlog import JsonlEventSink
    from stkhost.clock import FakeClock

    path = tmp_path / "S001.jsonl"
    sink = JsonlEventSink(path, "S001", FakeClock())
    sink.record("elected", 1, "first")
    with open(path, "ab") as fh:
        fh.write(b'{"node": "S001", "seq": 2, "kin')  # died mid-append
    tail = EventTail(tmp_path)
    assert [e["seq"] for e in tail.new_events()] == [1]
    restarted = JsonlEventSink(path, "S001", FakeClock())
    restarted.record("stepped_down", 1, "after the crash")
    assert [(e["seq"], e["kind"]) for e in tail.new_events()] == [(2, "stepped_down")]


# -- issue 42: no handoff to the dead --------------------------------------------------------
def _m(priority=50, eligible=True):
    from types import SimpleNamespace

    return SimpleNamespace(eligible=eligible, priority=priority)


def test_a_member_whose_beacons_stopped_is_never_the_successor_and_the_next_one_is():
    from elections.core.eligibility import successor, unheard

    members = {"S001": _m(), "S002": _m(), "S003": _m()}
    hears = {"S001": ["S002", "S003"], "S002": ["S001", "S003"], "S003": ["S001", "S002"]}
    # S001 leads; S002 (the rule's first pick) was killed 3 s ago; S003 beacons every 0.2 s.
    gone = unheard("S001", {"S002": (3.0, 0.2), "S003": (0.1, 0.2)}, hears, 0.2, listening=60.0)
    assert gone == {"S002": "beacons not heard for 3.0 s > 2.0 s"}
    assert successor(members, excluding="S001") == "S002"  # heartbeats alone: the dead one
    assert successor(members, excluding="S001", unheard=gone) == "S003"
    # Nobody left: released to no one (every live member then contends), never to the dead.
    assert successor({"S001": _m(), "S002": _m()}, excluding="S001", unheard=gone) is None


def test_a_member_heard_lately_or_slowly_beaconing_is_still_chosen():
    from elections.core.eligibility import unheard

    hears = {"S001": ["S002"], "S002": ["S001"]}
    assert unheard("S001", {"S002": (1.9, 0.2)}, hears, 0.2, listening=60.0) == {}
    # Its beacons come every 0.5 s (its own interval): the limit follows the gap observed.
    assert unheard("S001", {"S002": (4.0, 0.5)}, hears, 0.2, listening=60.0) == {}


def test_a_member_never_heard_here_counts_as_heard_when_another_member_hears_it():
    from elections.core.eligibility import unheard

    # One-way path: S002's beacons do not reach S001, but S003's heartbeat says it hears S002.
    hears = {"S001": ["S003"], "S002": ["S001", "S003"], "S003": ["S001", "S002"]}
    assert unheard("S001", {"S003": (0.1, 0.2)}, hears, 0.2, listening=60.0) == {}
    hears["S003"] = ["S001"]  # no one hears it
    assert unheard("S001", {"S003": (0.1, 0.2)}, hears, 0.2, listening=60.0) == {
        "S002": "no member hears its beacons"
    }
    # Just started listening: nobody is judged unheard for want of a beacon yet.
    assert unheard("S001", {}, hears, 0.2, listening=0.5) == {}
    # A member whose heartbeat says nothing of beacons (beacons off there) is judged by heartbeats.
    assert unheard("S001", {}, {"S001": [], "S002": None}, 0.2, listening=60.0) == {}
