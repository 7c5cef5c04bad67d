"""A hostile party on the site's LAN against the station door (relay/server/station_door.py) and
what it extends (the entry's gate, the fencing proxy, its splice pipe, the keyed PROXY v2 header),
each attack on real loopback sockets or the door's own decision functions; docs/security.md,
"Attacks tried on the station door", lists them with their results."""

from __future__ import annotations

import time

from test_entry import view

from elections.ports.pool_view import PoolView
from relay.server.entry import EntryGate, target_of


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_pool_view_from_the_future_is_no_leader():
    """A pool.json left by the previous boot (its `updated` is that boot's monotonic reading, far
    above this boot's clock) or written by something else: never fresh, however far ahead."""
    now = time.monotonic()
    assert target_of(view(updated=now + 3600), now, 2.0) is None
    assert target_of(view(updated=now + 2.5), now, 2.0) is None
    assert target_of(view(updated=now), now, 2.0) is not None


def test_the_gate_shuts_the_moment_the_view_it_read_goes_stale_not_at_its_next_read():
    """The gate reads pool.json at most every `cache_s`; the view's freshness runs out between
    reads, and the gate says no from that moment (each send, each accept asks it)."""
    clock = Clock(1000.0)
    reads = []

    def read() -> PoolView:
        reads.append(clock.now)
        return view(updated=1000.0)

    gate = EntryGate(read, stale_after=2.0, cache_s=0.05, clock=clock)
    gate.target = gate.look()
    assert gate.target is not None and gate()
    clock.now = 1001.99  # read again: fresh still
    assert gate()
    clock.now = 1002.001  # within the cache, past the view's freshness
    assert not gate() and gate.look() is None
    assert len(reads) == 2


def test_a_leader_gone_from_pool_json_shuts_the_gate_within_10_ms():
    clock = Clock(1000.0)
    views = [view(updated=1000.0)]
    gate = EntryGate(lambda: views[-1], stale_after=2.0, clock=clock)
    gate.target = gate.look()
    views.append(PoolView(kmsn="k", node="S001", updated=1000.0))  # the worker: no leader
    clock.now += 0.0101  # 10 ms (and a float's rounding)
    assert not gate()
