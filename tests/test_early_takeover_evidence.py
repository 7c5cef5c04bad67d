"""An early takeover needs evidence (docs/serving-right.md, "The rules", rule 3d):
on a real share directory, with the real lock and compare-and-set, and the serving
right's real book fed the beacons a member would hear. A follower whose leader is
silent to a majority reads the lease while another member's claim has it moved aside,
or finds it damaged: it does not contend on that read, and it does once a valid read
names the silent leader. A claim that finds a fresher epoch than the one it judged on
starts over. The TTL path stays as it was."""

from __future__ import annotations

import random

from elections.core.beacons import Beacon
from elections.core.decide import Decision, Timing, Verdict
from elections.core.serving import ACKED, AckReport, ServingTiming
from elections.core.serving_book import ServingBook
from elections.ports.store.store import FileLeaseStore, WriteOutcome
from elections.runtime.elector import Elector
from elections.runtime.lease_writes import Identity
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789abcdef"
KMSN = "9999-9999-99-99"
T = Timing(ttl=10.0, renew=3.0, poll=2.0, deadline=7.0)
ST = ServingTiming.of(0.2)
MEMBERS = 3


class BookServing:
    """The serving right as the elector asks it, from the product's `ServingBook`, fed the
    beacons this member heard (what `runtime.beacon_link` does with verified datagrams)."""

    def __init__(self, node: str, clock: FakeClock) -> None:
        self.book = ServingBook(node, "b" * 16, ST, ttl=T.ttl)
        self.clock = clock
        self.reports: dict[str, tuple[Beacon, float]] = {}

    def hear(self, beacon: Beacon) -> None:
        now = self.clock.monotonic()
        self.book.heard(beacon, None, beacon.epoch, now)
        self.reports[beacon.node] = (beacon, now)

    def taken(self, epoch: int, cause: str | None, now: float, after: tuple[str, int] | None = None) -> None:
        self.book.taken(epoch, cause, MEMBERS, after, now)

    def overwritten(self, epoch: int, now: float) -> None:
        self.book.overwritten(epoch, now)

    def bound(self, epoch: int, now: float) -> float | None:
        return self.book.bound(epoch, MEMBERS, now)

    def lapsed(self, epoch: int, now: float) -> str | None:
        return self.book.lapsed(epoch, MEMBERS, now)

    def silent(self, holder: str, epoch: int) -> str | None:
        now = self.clock.monotonic()
        reports = [AckReport(b.node, now - at, b.ack_node, b.ack_epoch, b.quiet_ms / 1000)
                   for b, at in self.reports.values()]  # fmt: skip
        return self.book.silent(holder, epoch, MEMBERS, reports, now)


def elector(tmp_path, clock: FakeClock, node: str, serving: BookServing | None = None) -> Elector:
    me = Identity(node=node, kmsn=KMSN, station=node, ip=f"10.0.0.{node[-1]}", port=9530, pid=4242)
    store = FileLeaseStore(tmp_path, TOKEN, node, clock)
    return Elector(store, clock, me, T, rng=random.Random(7), sleep=clock.advance, serving=serving)


def silent_pool(tmp_path):
    """S001 leads epoch 1 by acks; S002 heard it (`serve: ack`) and then nothing for longer than S,
    and S003's beacon says it has not heard S001 for that long either."""
    clock = FakeClock()
    leader = elector(tmp_path, clock, "S001")
    assert leader.cycle().reason.startswith("elected: took epoch 1")
    serving = BookServing("S002", clock)
    follower = elector(tmp_path, clock, "S002", serving)
    assert follower.cycle().verdict is Verdict.FOLLOW
    serving.hear(Beacon(KMSN, "S001", "10.0.0.1", 9530, "leader", 1, 0, "a" * 16, 5, serve=ACKED))
    clock.advance(ST.silence + 0.1)
    s003_says_silent(serving, 9)
    assert serving.silent("S001", 1), "the pool is silent about S001"
    return clock, follower


def s003_says_silent(serving: BookServing, seq: int) -> None:
    quiet = int(ST.silence * 1000) + 50
    serving.hear(Beacon(KMSN, "S003", "10.0.0.3", 9530, "follower", 1, 0, "c" * 16, seq, ack_node="S001",
                        ack_epoch=1, ack_boot="a" * 16, ack_seq=5, quiet_ms=quiet))  # fmt: skip


def looks_until_elected(clock: FakeClock, follower: Elector, within: float, every: float = 2.0) -> Decision:
    """The follower looks every `every` s (no gap its TTL could not count) until it takes the lease;
    it must within `within` s (and one look)."""
    start = clock.monotonic()
    while True:
        clock.advance(every)
        d = follower.cycle()
        if follower.is_leader or clock.monotonic() - start > within + every:
            return d


def test_no_early_takeover_on_a_read_of_the_lease_moved_aside_by_a_claim_in_progress(tmp_path):
    clock, follower = silent_pool(tmp_path)
    claimer = FileLeaseStore(tmp_path, TOKEN, "S003", clock)
    seen = []

    def make(epoch: int) -> None:  # runs under S003's lock, with the lease moved aside
        assert not (tmp_path / "relay_leader.json").exists()
        seen.append(follower.cycle())
        return None  # S003's claim starts over: the lease goes back

    assert claimer.acquire(make, claimer.read().revision, 1, {"node": "S003"})[0] is WriteOutcome.CHANGED
    [during] = seen
    assert during.verdict is Verdict.WAIT and during.deferred == "missing", during
    assert "early takeover of S001 epoch 1 deferred, no evidence: no lease file" in during.reason
    assert not follower.is_leader and follower.deferred == {"missing": 1}
    after = follower.cycle()  # the lease is back: a valid read names the silent leader
    assert after.reason.startswith("elected: took epoch 2"), after
    assert follower.last_read is not None and follower.last_read.record is not None
    lease = FileLeaseStore(tmp_path, TOKEN, "S009", clock).read().record
    assert lease is not None and (lease.node, lease.epoch) == ("S002", 2)


def test_a_damaged_lease_defers_the_early_takeover_and_the_ttl_still_decides(tmp_path):
    clock, follower = silent_pool(tmp_path)
    lease = tmp_path / "relay_leader.json"
    good = lease.read_bytes()
    lease.write_bytes(good[: len(good) // 2])  # cut short: no evidence of who holds it
    d = follower.cycle()
    assert (d.verdict, d.deferred, d.wake_in) == (Verdict.WAIT, "corrupt", 0.25), d
    for i in range(10):  # looks until the TTL of the last valid lease, the pool silent: none takes over
        clock.advance(0.8)
        s003_says_silent(follower.serving, 10 + i)  # type: ignore[arg-type]
        d = follower.cycle()
        assert (d.verdict, d.deferred, follower.is_leader) == (Verdict.WAIT, "corrupt", False), d
    d = looks_until_elected(clock, follower, T.ttl)
    assert d.reason.startswith("elected: took epoch 2") and "expired" in d.reason, d
    assert follower.deferred["corrupt"] >= 11 and "blind" not in follower.deferred, follower.deferred


def test_a_claim_that_finds_an_epoch_fresher_than_the_one_judged_on_starts_over(tmp_path):
    """S003's claim of epoch 2 wrote its member record but never its lease (the share failed
    between the two), so the lease still names S001 epoch 1: the store knows a fresher epoch
    than the silence was judged on. S002 writes nothing, knows epoch 2 from then on, and the
    early takeover waits for a lease of that epoch; the TTL takes epoch 3."""
    clock, follower = silent_pool(tmp_path)
    FileLeaseStore(tmp_path, TOKEN, "S003", clock).write_member({"node": "S003", "seq": 1, "epoch": 2})
    d = follower.cycle()
    assert not follower.is_leader and d.verdict is Verdict.WAIT and d.deferred == "stale", d
    assert follower.deferred.get("fresher") == 1 and follower.memory.max_epoch == 2
    lease = FileLeaseStore(tmp_path, TOKEN, "S009", clock).read().record
    assert lease is not None and (lease.node, lease.epoch) == ("S001", 1)
    d = looks_until_elected(clock, follower, T.ttl + 0.01)
    assert d.reason.startswith("elected: took epoch 3") and "expired" in d.reason, d


def test_the_early_takeover_on_a_valid_read_is_unchanged(tmp_path):
    _, follower = silent_pool(tmp_path)
    d = follower.cycle()
    assert d.reason.startswith("elected: took epoch 2"), d
    assert follower.deferred == {}
    assert follower.serving is not None and follower.serving.book.mode(2) == ACKED  # type: ignore[attr-defined]
    assert "S001 silent for" in d.reason and "expired" not in d.reason
    assert follower.store.read().record.node == "S002"  # type: ignore[union-attr]


def test_a_taker_that_finds_the_old_holders_renewal_over_its_claim_rewrites_it_and_is_not_clean_for_a_ttl(
    tmp_path,
):
    """The lockless renewal's race (issue 37, SPIN's trails): S001 read its own lease, S002 took
    epoch 2 on silence, and S001's rename landed over S002's record. S002's next look finds S001's
    newer record of epoch 1: no evidence that anyone else leads, so it rewrites its own (under the
    lock) — and S001 renews on meanwhile, so its gate may be open by acks: S002's release is not
    clean, and its lapse does not fall back to the lease, until a TTL after."""
    import os

    from elections.core.lease import LeaseRecord
    from elections.core.serving import DRIFT

    clock, follower = silent_pool(tmp_path)
    assert follower.cycle().reason.startswith("elected: took epoch 2")
    serving = follower.serving
    assert isinstance(serving, BookServing) and serving.book.right is not None
    seen = FileLeaseStore(tmp_path, TOKEN, "S009", clock).read().record
    assert seen is not None and seen.node == "S002"
    old = follower.memory.writers
    [(_, _, s001_seq)] = [w for w in old if w[0] == "S001"]
    hidden = LeaseRecord(kmsn=KMSN, station="S001", ip="10.0.0.1", port=9530, pid=4242, epoch=1,
                         lease_until="20990101000000", node="S001", renew_seq=s001_seq + 1,
                         ttl_s=T.ttl)  # fmt: skip
    (tmp_path / ".rename.tmp").write_bytes(hidden.encode(TOKEN))
    os.replace(tmp_path / ".rename.tmp", tmp_path / "relay_leader.json")  # S001's rename lands
    clock.advance(1.0)
    now = clock.monotonic()
    d = follower.cycle()
    assert follower.is_leader and follower.deferred.get("older_writer") == 1, d
    lease = FileLeaseStore(tmp_path, TOKEN, "S009", clock).read().record
    assert lease is not None and (lease.node, lease.epoch) == ("S002", 2), lease  # rewritten
    right = serving.book.right
    assert right.lease_ok_at >= now + T.ttl * (1 + DRIFT) / (1 - DRIFT) - 1e-6
    serving.book.fenced(2)
    assert serving.book.resigning(2, now + T.ttl) == {}  # not clean yet
