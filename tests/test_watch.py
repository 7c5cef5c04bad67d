"""Watched pools (`elections.runtime.watch`): a simulated pool on a real
directory, read by a real `PoolWatcher` through the store factory, with that
pool's key. No agent, no database: the projector is the batches it was handed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from harness import wait_until
from poolsim import SimPool

from elections.ports.local.localstate import LocalState
from elections.runtime.watch import PoolWatcher, Watchers
from stkconfig.parsed import SmbLogin, WatchedPool
from stkhost.clock import FakeClock

KMSN = "1111-1111-11-11"
KEY = "watched-pool-key-0123456789"


@dataclass
class Batches:
    """What the watcher handed to the projector: (kmsn, events) per batch."""

    got: list[tuple[str, list[dict]]] = field(default_factory=list)

    def submit(self, events, timeout=1.0, kmsn=None):  # type: ignore[no-untyped-def]
        self.got.append((kmsn, events))
        return True

    def kinds(self) -> list[str]:
        return [e["kind"] for _, batch in self.got for e in batch]


def watcher_for(tmp_path: Path, lease_dir: Path, key: str = KEY, clock=None, timeout: float = 2.0):  # type: ignore[no-untyped-def]
    watched = WatchedPool(KMSN, str(lease_dir), key, key, timeout, "OFFICE1")
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    batches = Batches()
    w = PoolWatcher(watched, "S001", clock or FakeClock(), LocalState(data), batches, 3.0, 1.0, 3.0)
    return w, batches, LocalState(data)


@pytest.fixture
def pool(tmp_path):
    sim = SimPool(tmp_path / "site-a" / "socket", KMSN, KEY, members=3)
    sim.elect("S002")
    sim.beat_all()
    return sim


def test_a_watcher_shows_the_leader_epoch_and_members_of_a_watched_pool(tmp_path, pool):
    clock = FakeClock()
    w, batches, local = watcher_for(tmp_path, pool.dir, clock=clock)
    view = w.look()
    assert view.watched and view.store_reachable and view.lease_status == "valid"
    assert (view.leader, view.epoch) == ("S002", 1)
    assert sorted(view.eligible()) == ["S001", "S002", "S003"]
    assert local.watched_pool(KMSN) == view  # what the panel reads
    assert batches.got[0][0] == KMSN and batches.kinds() == ["elected"]
    assert view.refusals["counts"] == {}
    # Heartbeats and the lease are timed on this machine's clock: silence ages them.
    clock.advance(5)
    view = w.look()
    assert view.eligible() == set() and view.lease_seen_at == 1000.0
    pool.tick()
    assert w.look().eligible() == {"S001", "S002", "S003"}


def test_a_record_forged_in_a_watched_pool_is_refused_with_that_pools_key(tmp_path, pool):
    w, batches, _ = watcher_for(tmp_path, pool.dir)
    w.look()
    pool.forge_lease("S666", epoch=99)
    pool.forge_event("S003", target="S002")
    view = w.look()
    assert (view.leader, view.epoch) == ("S002", 1)  # the last valid lease, aging
    assert view.lease_status == "forged"
    assert view.refusals["counts"]["forged"] == 2
    assert {r["source"] for r in view.refusals["recent"]} == {"relay_leader.json", "events/S003.jsonl"}
    assert "drain_requested" not in batches.kinds()
    assert not w.commands.drained


def test_the_watched_pools_records_do_not_verify_with_another_key(tmp_path, pool):
    w, batches, _ = watcher_for(tmp_path, pool.dir, key="this-agents-own-key-0123")
    view = w.look()
    assert view.leader is None and view.lease_status == "forged"
    assert view.members == {} and batches.got == []
    assert view.refusals["counts"]["forged"] >= 5  # lease, three heartbeats, one event line


def test_a_replayed_older_lease_is_refused_and_the_newer_one_kept(tmp_path, pool):
    w, _, _ = watcher_for(tmp_path, pool.dir)
    old = (pool.dir / "relay_leader.json").read_bytes()
    pool.elect("S003", reason="promote")
    assert w.look().epoch == 2
    (pool.dir / "relay_leader.json").write_bytes(old)
    view = w.look()
    assert (view.leader, view.epoch) == ("S003", 2) and view.lease_status == "replayed"
    assert view.refusals["counts"]["replayed"] == 1


def test_a_watched_share_that_goes_away_is_unreachable_and_comes_back(tmp_path, pool):
    w, _, _ = watcher_for(tmp_path, pool.dir)
    assert w.look().store_reachable
    away = pool.dir.with_name("socket.away")
    pool.dir.rename(away)
    view = w.look()
    assert not view.store_reachable and view.lease is None and view.lease_status == "unreachable"
    assert "gone" in view.lease_detail and view.decision.startswith("watching: share unreachable")
    away.rename(pool.dir)
    view = w.look()
    assert view.store_reachable and view.leader == "S002"


def test_each_watched_pool_looks_on_its_own_thread(tmp_path):
    """A pool whose looks hang does not hold up another pool's looks."""
    good = SimPool(tmp_path / "b" / "socket", KMSN, KEY)
    good.elect("S001")
    w, _, local = watcher_for(tmp_path, good.dir)

    class Hung:
        kmsn = "2222"
        backlog = False

        def look(self):  # type: ignore[no-untyped-def]
            time.sleep(3600)

    watchers = Watchers([Hung(), w], poll=0.05).start()  # type: ignore[list-item]
    try:
        seen = time.monotonic()
        while local.watched_pool(KMSN).updated is None or local.watched_pool(KMSN).leader != "S001":
            assert time.monotonic() - seen < 10, "the good pool was never looked at"
            time.sleep(0.05)
    finally:
        watchers.stop()


def test_a_watched_pool_on_an_smb_share_is_read_through_the_factory_and_a_hung_server_is_unreachable(
    tmp_path, own_samba
):
    from samba import PASSWORD

    sim = SimPool(own_samba.path("socket"), KMSN, KEY, members=3)
    sim.elect("S003")
    sim.beat_all()
    watched = WatchedPool(KMSN, own_samba.url("socket"), KEY, KEY, 1.0, "OFFICE1", SmbLogin(PASSWORD))
    (tmp_path / "data").mkdir()
    local = LocalState(tmp_path / "data")
    w = PoolWatcher(watched, "S001", FakeClock(), local, Batches(), 3.0, 1.0, 3.0)
    view = w.look()
    assert view.store_reachable and (view.leader, view.epoch) == ("S003", 1)
    assert sorted(view.members) == ["S001", "S002", "S003"]
    own_samba.pause()
    try:
        started = time.monotonic()
        view = w.look()
        assert not view.store_reachable and view.lease is None
        assert time.monotonic() - started < 3 * 1.0 + 2  # each share operation given up at SHARE_TIMEOUT
    finally:
        own_samba.resume()
    assert wait_until(lambda: w.look().store_reachable, 30, "the share back")
