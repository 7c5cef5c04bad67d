"""A real agent joining a pool whose event files were compacted (issue 12, point 3).

Three members' histories (written by the real writer with a small retention,
so most of their segments are retired) hold, in retired segments only, an
election at epoch 41, a drain and then an undrain of the joiner, a pause and
then a resume, and a drain of another member. A new agent must rebuild that
state from what the files still hold, never take epoch 41 again, and keep in
its database the history the files later let go.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness import TOKEN, wait_until

from elections.core.commands import PoolCommands
from elections.ports.events.eventlog import EventTail, JsonlEventSink
from elections.ports.events.segments import Retention
from elections.ports.local.localstate import LocalState
from stkhost.clock import FakeClock

SMALL = Retention(segment_bytes=4 << 10, keep_bytes=16 << 10)
WRITERS = ("H001", "H002", "H003")


def filler(sink: JsonlEventSink, clock: FakeClock, n: int, epoch: int) -> None:
    for i in range(n):
        sink.record("action_applied", epoch, f"start_relay done, step {i} " + "x" * 80)
        clock.advance(60)


def rows(data_dir: Path) -> dict[tuple[str, int], tuple[str, int]]:
    db = data_dir / "stkrelay.sqlite3"
    if not db.exists():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            sql = "SELECT node, seq, kind, epoch FROM elections_electionevent WHERE node LIKE 'H%'"
            found = con.execute(sql)
            return {(n, s): (k, e) for n, s, k, e in found.fetchall()}
        finally:
            con.close()
    except sqlite3.Error:
        return {}


def test_a_new_agent_rebuilds_the_pool_from_compacted_files_and_keeps_what_they_retire(site_factory):
    site = site_factory(n=1)
    events = site.lease_dir / "events"
    events.mkdir()
    clock = FakeClock()
    sinks = {n: JsonlEventSink(events / f"{n}.jsonl", n, clock, key=TOKEN, retention=SMALL) for n in WRITERS}
    h1, h2, h3 = (sinks[n] for n in WRITERS)
    h1.record("elected", 41, "won", cause="first")
    h2.record("drain_requested", 41, "op", target="S001", clock=1, actor="alice")
    h3.record("undrain_requested", 41, "op", target="S001", clock=2, actor="bob")
    h3.record("pause_requested", 41, "op", clock=3, actor="bob")
    h1.record("resume_requested", 41, "op", clock=4, actor="alice")
    h1.record("drain_requested", 41, "op", target="H002", clock=5, actor="alice")
    for sink in sinks.values():
        filler(sink, clock, 300, 41)
        assert sink.compactor is not None
        sink.compactor.join()
        sink.compactor.run()
        assert sink.compactor.retired_total > 0
    tail = EventTail(events, key=TOKEN)
    held = []
    while not held or tail.backlog:
        held += tail.new_events()
    assert (("H001", 1) in {(e["node"], e["seq"]) for e in held}) and len(held) < 3 * 306
    truth = PoolCommands()
    truth.apply(held)
    assert truth.drained == {"S001": False, "H002": True} and not truth.paused and truth.clock == 5

    agent = site.agents[0]
    site.start()
    lease = site.wait_leader(timeout=60)
    assert lease.node == "S001" and lease.epoch >= 42  # epoch 41 is known only from a retired segment
    local = LocalState(agent.data_dir)
    wait_until(lambda: local.pool().command_clock == 5, 30, "the pool's command clock")
    assert local.pool().paused is False
    want = {(e["node"], e["seq"]) for e in held}
    wait_until(lambda: want <= set(rows(agent.data_dir)), 30, "every event the files hold, in the database")
    assert rows(agent.data_dir)[("H001", 1)] == ("elected", 41)

    # The writers go on; their files retire what the agent already holds.
    for sink in sinks.values():
        filler(sink, clock, 300, 41)
        sink.compactor.join()
        sink.compactor.run()
    last = {n: sinks[n]._seq for n in WRITERS}
    wait_until(lambda: all((n, s) in rows(agent.data_dir) for n, s in last.items()), 30, "the newest events")
    fresh = EventTail(events, key=TOKEN)
    now_held: set[tuple[str, int]] = set()
    while not now_held or fresh.backlog:
        now_held |= {(e["node"], e["seq"]) for e in fresh.new_events()}
    projected = set(rows(agent.data_dir))
    gone = want - now_held
    assert gone and gone <= projected  # history beyond the files' retention stays in the database
