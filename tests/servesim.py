"""A model of a pool for the serving right (docs/design.md §15): 3–5 members on
simulated time, driving the product's own pure decisions — `core.decide`
(`track`, `decide`) and `core.serving` (`ServingBook`: adherence, the leader's
right, the majority's silence) — with lost, delayed and partitioned beacons,
freezes (SIGSTOP: the clock runs on, nothing is handled), cut cables (LAN and
share both gone for a while), power losses (gone for good) and clock rates
that differ by up to `DRIFT`.

What is modelled rather than run: the store (one compare-and-set register
under a lock: a claim holds the lock for `claim` seconds, with the lease moved
aside meanwhile — every read then finds no file, as on the share, docs/design.md
§5.1 — and writes its member record first, the lease at its end; a claim that
finds the lock held is BUSY; the revision of a missing file is "" whatever
happened, as `revision_of(None)`), a writer of the share without the key
(`Faults.damage`: junk written over the lease; `Faults.deletes`: the lease
deleted; the leader rewrites its own record at its next look), the beacon
transport (one datagram per beacon to each other member, each lost with
probability `loss`, delayed up to `delay`, dropped across a partition) and
the elector's acting on a verdict (take, renew, step down), as
`runtime.elector` does. A member's relay serves, unless frozen or powered
off, until the deadline of the gate it was last given —
`min(renew deadline, the right's bound)`, the same expression as
`Elector.leader_valid_until`, published after each of its worker's events —
plus `GATE_LAG` (its last byte). It never learns of a step-down but from that
deadline (the safety argument rests on deadlines alone), a lower deadline only
`RELAY_LAG` later (its cache of the state file), and a frozen relay woken
before its deadline serves on (SIGCONT: the relay wakes with the worker).

`Pool.run()` returns the serving intervals in real time; `overlaps()` finds
two relays of different epochs serving at one instant; `unfounded` lists every
early takeover (`gone`, `silent`) decided on a read that was no evidence — not
a valid lease of the very holder and epoch judged (issue 22). `scenario(seed)`
draws a random one. `Pool(blind=False)` counts a member's own blindness (frozen,
cut) toward the TTL of the last valid lease it saw, as before `core.lease_memory.blind_gap`.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field, replace

from elections.core.beacons import FOLLOWER, LEADER, RESIGN, Beacon
from elections.core.decide import EARLY, Observation, Timing, Verdict, decide, evidence_subject
from elections.core.lease import LeaseRead, LeaseRecord
from elections.core.lease_memory import Memory, vouched
from elections.core.lease_memory import track as track_read
from elections.core.serving import DRIFT, GATE_LAG, LEASE, AckReport, ServingTiming
from elections.core.serving_book import ServingBook

KMSN = "9999-9999-99-99"
INTERVAL = 0.2
TIMING = Timing(ttl=10.0, renew=3.0, poll=2.0, deadline=7.0)
WATCH = 0.5  # the agent's cheap look at the lease (seconds, its own clock)
RELAY_LAG = 0.15  # a relay reads a lower deadline this late (its 0.1 s cache of leadership.json, the write)
HORIZON = 60.0  # a member is counted while heard within this long (runtime.agent MEMBER_HORIZON_S)
# runtime.agent.FENCE_WITHIN: a handing-off leader's longest wait between its fence and its handoff
FENCE_WITHIN = 0.25
EMPTY = 1e-9  # real seconds: an interval no longer than this is a shut gate read back through the clock rates


@dataclass
class Faults:
    """What happens to one run, in real seconds."""

    loss: float = 0.0
    delay: float = 0.0
    freezes: list[tuple[str, float, float]] = field(default_factory=list)  # node, from, to
    cuts: list[tuple[str, float, float]] = field(default_factory=list)  # node: no LAN, no share
    partitions: list[tuple[frozenset[str], float, float]] = field(default_factory=list)  # one side, from, to
    power: list[tuple[str, float]] = field(default_factory=list)  # node, when: gone for good
    rates: dict[str, float] = field(default_factory=dict)  # clock rate of each node (1 ± DRIFT)
    # Planned switchovers (relayctl promote): when, and to whom; the leader then at that instant
    # fences (its relay's gate shut: read RELAY_LAG late), waits `fence`, writes the handoff.
    promotes: list[tuple[float, str | None]] = field(default_factory=list)  # None: released to no one
    fence: float = FENCE_WITHIN  # 0: the handoff written at once (the order before issue 22's fence)
    says_fenced: bool = True  # the resign says `fenced` (a clean release: its taker serves by the lease)
    damage: list[float] = field(default_factory=list)  # when junk is written over the lease
    deletes: list[float] = field(default_factory=list)  # when the lease file is deleted
    claim: tuple[float, float] = (0.005, 0.08)  # how long a claim holds the lock, the lease aside (real s)
    # The share lock before issue 22's fix (`ShareLock`: "present at every look" counted from a look
    # long ago): a claim that finds the lock held breaks it, and finds the lease moved aside (missing).
    lock_breaks: bool = False


@dataclass
class Member:
    node: str
    rate: float
    offset: float
    book: ServingBook
    memory: Memory
    boot: str
    seq: int = 0
    heard: dict[str, tuple[Beacon, float]] = field(default_factory=dict)  # last beacon per sender, at (local)
    pub: tuple[int, float, float] | None = None  # the relay's gate: epoch, deadline (real), since (real)
    told_silent: tuple[str, int] | None = None
    fenced: int | None = None  # an epoch this member stopped serving before handing it off
    handing: bool = False  # inside its release, between the fence and the handoff: no cycle runs
    # node -> (epoch, renew_seq, first heard at: local) of the newest renewal its leader beacons named
    renewals: dict[str, tuple[int, int, float]] = field(default_factory=dict)

    def local(self, t: float) -> float:
        return self.offset + self.rate * t

    def real(self, local: float) -> float:
        return (local - self.offset) / self.rate


class Pool:
    def __init__(self, n: int, faults: Faults, seed: int, timing: ServingTiming | None = None,
                 until: float = 60.0, start_over: bool = True, blind: bool = True,
                 vouch: bool = True) -> None:  # fmt: skip
        self.rng = random.Random(seed)
        # A read that is no evidence after a member's own blindness restarts its timer (`blind_gap`);
        # False: the blind time counts toward the TTL of the last valid lease, as before.
        self.max_gap = TIMING.blind_after if blind else math.inf
        # A read that is no evidence while the holder's beacons name a newer renewal restarts the
        # timer when they came (`core.lease_memory.vouched`); False: as before issue 22's end.
        self.vouch = vouch
        self.share_rng = random.Random(seed + 7919)  # the share's own draws leave the beacons' as they were
        # A claim that finds an epoch fresher than any its member knew starts over (`Elector._fresher`);
        # False: it takes one more than that epoch, as before issue 22's fix.
        self.start_over = start_over
        self.faults = faults
        self.until = until
        self.serving = timing or ServingTiming.of(INTERVAL)
        self.nodes = [f"S{i + 1:03d}" for i in range(n)]
        self.members: dict[str, Member] = {}
        for i, node in enumerate(self.nodes):
            boot = f"{seed % 2**32:08x}{i:08x}"
            rate = faults.rates.get(node, 1.0)
            book = ServingBook(node, boot, self.serving, TIMING.ttl)
            self.members[node] = Member(node, rate, self.rng.uniform(0, 1000), book, Memory(node=node), boot)
        self.record: LeaseRecord | None = None
        self.revision = 0
        self.damaged: str | None = None  # the revision of junk written over the lease, while it is there
        self.claims: list[str] = []  # members whose claim holds the lock, the lease moved aside (one, but
        # two with `Faults.lock_breaks`)
        self.max_epoch = 0  # the highest epoch of the members' records (a claim writes its own first)
        # Early takeovers decided on a read that was no evidence: (when, node, judged subject, read status)
        self.unfounded: list[tuple[float, str, tuple[str, int], str]] = []
        self.queue: list[tuple[float, int, str, str, object]] = []
        self.counter = itertools.count()
        self.intervals: list[tuple[str, int, float, float]] = []  # node, epoch, from, to (real)
        self.elections: list[tuple[float, str, int, str]] = []  # when, node, epoch, cause
        self.lease_starts = 0  # epochs taken from a release that serve by the lease at once (a clean one)
        self.now = 0.0

    # -- faults ---------------------------------------------------------------------------
    def dead(self, node: str, t: float) -> bool:
        return any(n == node and t >= at for n, at in self.faults.power)

    def frozen_until(self, node: str, t: float) -> float | None:
        for n, a, b in self.faults.freezes:
            if n == node and a <= t < b:
                return b
        return None

    def cut(self, node: str, t: float) -> bool:
        return any(n == node and a <= t < b for n, a, b in self.faults.cuts)

    def linked(self, a: str, b: str, t: float) -> bool:
        if self.cut(a, t) or self.cut(b, t):
            return False
        parts = self.faults.partitions
        return not any(lo <= t < hi and ((a in side) != (b in side)) for side, lo, hi in parts)

    # -- the schedule ---------------------------------------------------------------------------
    def at(self, t: float, node: str, what: str, data: object = None) -> None:
        heapq.heappush(self.queue, (t, next(self.counter), node, what, data))

    def after_local(self, m: Member, seconds: float, what: str) -> None:
        self.at(m.real(m.local(self.now) + seconds), m.node, what)

    def run(self) -> Pool:
        for m in self.members.values():
            self.at(self.rng.uniform(0, INTERVAL), m.node, "beacon")
            self.at(self.rng.uniform(0, WATCH), m.node, "watch")
            self.at(self.rng.uniform(0, TIMING.renew), m.node, "renew")
        for t, target in self.faults.promotes:  # the command reaches whoever leads then (its nudge)
            self.at(t, "", "promote", target)
        for t in self.faults.damage:
            self.at(t, "", "damage")
        for t in self.faults.deletes:
            self.at(t, "", "delete")
        while self.queue:
            t, _, node, what, data = heapq.heappop(self.queue)
            if t > self.until:
                break
            self.now = t
            if what in ("damage", "delete", "claimed"):  # the share's doing, whatever its members are
                getattr(self, "_" + what)(data)
                if what == "claimed":
                    self.publish(self.members[node])
                continue
            if what == "promote":
                leaders = [x for x in self.members.values() if x.memory.leader_epoch is not None]
                node = leaders[0].node if leaders else ""
                if not node or node == data or self.members[node].handing:
                    continue
                if node in self.claims:  # its elector is inside a claim: the command waits for its end
                    self.at(t + 0.01, "", "promote", data)
                    continue
            m = self.members[node]
            if self.dead(node, t):
                continue
            wake = self.frozen_until(node, t)
            if wake is not None:  # SIGSTOP: nothing is handled until SIGCONT
                self.at(wake, node, what, data)
                continue
            getattr(self, "_" + what)(m, data)
            self.publish(m)
        for m in self.members.values():
            if m.pub is not None:
                epoch, deadline, since = m.pub
                self.interval(m, epoch, since, min(deadline, self.until))
        return self

    # -- what a member does ------------------------------------------------------------------------
    def _beacon(self, m: Member, _: object) -> None:
        m.seq += 1
        now = m.local(self.now)
        mem = m.memory
        members = self.count(m)
        if mem.leader_epoch is not None:
            role, epoch, renew_seq = LEADER, mem.leader_epoch, mem.renew_seq
        else:
            role, epoch, renew_seq = FOLLOWER, mem.seen_key[1] if mem.seen_key else mem.max_epoch, 0
        extra = m.book.outgoing(mem.leader_epoch, m.seq, members, now)
        beacon = Beacon(KMSN, m.node, "10.0.0.1", 9530, role, epoch, renew_seq, m.boot, m.seq, **extra)
        self.broadcast(m, beacon)
        self.after_local(m, INTERVAL * self.rng.uniform(0.8, 1.2), "beacon")
        if mem.leader_epoch is None and mem.seen_key is not None:  # the silence loop
            holder, held = mem.seen_key[0], mem.seen_key[1]
            if self.silent(m, holder, held) and m.told_silent != (holder, held):
                m.told_silent = (holder, held)
                self.cycle(m)

    def _promote(self, m: Member, target: object) -> None:
        """The leader's planned handoff (`Elector.release` with `on_fence`): its gate shut now
        (its relay reads that RELAY_LAG late), the handoff written `fence` later (its clock)."""
        epoch = m.memory.leader_epoch
        if epoch is None:
            return
        m.fenced = epoch
        if m.pub is not None:  # the relay's gate: shut now, read late
            old_epoch, old_deadline, since = m.pub
            self.interval(m, old_epoch, since, min(old_deadline, self.now + RELAY_LAG))
            m.pub = None
        if self.faults.fence > 0:
            m.handing = True  # `Elector.release` waits out its fence on the election thread
            self.at(m.real(m.local(self.now) + self.faults.fence), m.node, "handoff", target)
        else:
            self._handoff(m, target)

    def _handoff(self, m: Member, target: object) -> None:
        """Write the released lease naming `target` (a compare-and-set), step down, resign."""
        m.handing = False
        mem, rec = m.memory, self.record if self.damaged is None and not self.claims else None
        epoch = mem.leader_epoch
        if epoch is not None and rec is not None and rec.node == m.node and rec.epoch == epoch:
            seq = mem.renew_seq + 1
            self.record = replace(
                rec, renew_seq=seq, ttl_s=0, handoff_to=None if target is None else str(target)
            )
            self.revision += 1
        m.memory = replace(mem, leader_epoch=None, renewed_at=None)
        m.seq += 1
        held = epoch or mem.max_epoch
        if epoch is not None and epoch == m.fenced and self.faults.says_fenced:  # `Agent._fence`, done
            m.book.fenced(epoch)
        said = m.book.resigning(held, m.local(self.now))
        self.broadcast(m, Beacon(KMSN, m.node, "10.0.0.1", 9530, RESIGN, held, 0, m.boot, m.seq, **said))

    def broadcast(self, m: Member, beacon: Beacon) -> None:
        for other in self.nodes:
            if other == m.node or not self.linked(m.node, other, self.now):
                continue
            if self.rng.random() < self.faults.loss:
                continue
            self.at(self.now + self.rng.uniform(0, self.faults.delay), other, "receive", beacon)

    def _receive(self, m: Member, beacon: object) -> None:
        assert isinstance(beacon, Beacon)
        now = m.local(self.now)
        last = m.heard.get(beacon.node)
        if last is not None and last[0].boot == beacon.boot and last[0].seq >= beacon.seq:
            return  # the board refuses what is not newer (a delayed datagram overtaken)
        m.heard[beacon.node] = (beacon, now)
        named = m.renewals.get(beacon.node)
        if beacon.role == LEADER and (named is None or named[:2] != (beacon.epoch, beacon.renew_seq)):
            m.renewals[beacon.node] = (beacon.epoch, beacon.renew_seq, now)  # `BeaconService._keys`
        mem = m.memory
        m.book.heard(beacon, mem.leader_epoch, mem.max_epoch, now)
        if beacon.role == LEADER and mem.leader_epoch is not None and beacon.epoch > mem.leader_epoch:
            self.cycle(m)  # the board's reaction: read the store
        elif beacon.role in (LEADER, RESIGN) and mem.leader_epoch is None:
            key = (beacon.node, beacon.epoch, beacon.renew_seq)
            if beacon.role == RESIGN or (key != mem.seen_key and beacon.epoch >= mem.max_epoch):
                self.cycle(m)

    def _watch(self, m: Member, _: object) -> None:
        self.cycle(m)
        self.after_local(m, WATCH, "watch")

    def _renew(self, m: Member, _: object) -> None:
        self.cycle(m, renewing=True)
        self.after_local(m, TIMING.renew, "renew")

    def silent(self, m: Member, holder: str, epoch: int) -> str | None:
        now = m.local(self.now)
        reports = [AckReport(b.node, now - at, b.ack_node, b.ack_epoch, b.quiet_ms / 1000)
                   for b, at in m.heard.values()]  # fmt: skip
        return m.book.silent(holder, epoch, self.count(m), reports, now)

    def count(self, m: Member) -> int:
        """The members `m` counts (`Agent.pool_size`): itself and those it heard within the
        horizon. The product also counts members whose heartbeat it saw on the share; the
        model counts beacons alone, from nothing at the start: every view starts short."""
        now = m.local(self.now)
        return 1 + sum(1 for _, at in m.heard.values() if now - at <= HORIZON)

    def read(self, m: Member) -> LeaseRead | None:
        if self.cut(m.node, self.now):
            return None
        if self.claims or self.record is None:  # moved aside by a claim, or gone
            return LeaseRead("missing", detail="no lease file", revision="")
        if self.damaged is not None:
            return LeaseRead("corrupt", detail="lease file is not JSON", revision=self.damaged)
        return LeaseRead("valid", record=self.record, revision=str(self.revision))

    def lease_revision(self) -> str:
        """What a claim under the lock finds (`ShareBackend._fresh`)."""
        if self.record is None:
            return ""
        return self.damaged if self.damaged is not None else str(self.revision)

    def _damage(self, _: object) -> None:
        if self.record is not None and not self.claims:  # a lease moved aside is not there to hit
            self.damaged = f"junk{self.revision}-{self.share_rng.random()}"

    def _delete(self, _: object) -> None:
        if not self.claims:
            self.record, self.damaged = None, None

    def cycle(self, m: Member, renewing: bool = False) -> None:
        if m.node in self.claims or m.handing:
            return  # its elector is inside its claim (`store.acquire`) or its release: no other cycle
        read = self.read(m)
        now = m.local(self.now)
        mem = m.memory
        if read is not None:
            mem = track_read(mem, read, now, TIMING.ttl, self.max_gap)
            if self.vouch and mem.seen_key is not None and mem.leader_epoch is None:  # `Elector._vouched`
                named = m.renewals.get(mem.seen_key[0])
                renewal = named[1:] if named is not None and named[0] == mem.seen_key[1] else None
                mem = vouched(mem, read, renewal, TIMING.ttl)  # one TTL in all between valid reads
        m.memory = mem
        silent = lapsed = None
        subject = evidence_subject(mem, read)
        if mem.leader_epoch is None and subject is not None:
            why = self.silent(m, *subject)
            silent = (*subject, why) if why else None
        if mem.leader_epoch is not None:
            lapsed = m.book.lapsed(mem.leader_epoch, self.count(m), now)
        obs = Observation(read, renewing, silent=silent, serving_lapsed=lapsed)
        decision = decide(mem, obs, now, TIMING)
        if decision.verdict is Verdict.CONTEND and decision.cause in EARLY and subject is not None:
            rec = read.record if read is not None else None
            if read is None or read.status != "valid" or rec is None or (rec.node, rec.epoch) != subject \
                    or rec.epoch < mem.max_epoch:  # fmt: skip
                self.unfounded.append((self.now, m.node, subject, read.status if read else "unreachable"))
        if decision.verdict is Verdict.CONTEND and read is not None:
            self.take(m, read, decision.cause)
        elif decision.verdict is Verdict.RENEW and read is not None:
            self.renew(m, read)
        elif decision.verdict is Verdict.STEP_DOWN:
            m.memory = replace(m.memory, leader_epoch=None, renewed_at=None)

    def take(self, m: Member, read: LeaseRead, cause: str | None) -> None:
        """The claim (`ShareBackend.claim`): BUSY while another holds the lock; under it the lease is
        moved aside, compared with what was read (CHANGED), the member record written with one more
        than any epoch known, and the lease written `Faults.claim` later (the `claimed` event)."""
        if self.claims and not self.faults.lock_breaks:
            return  # BUSY
        if read.revision != ("" if self.claims else self.lease_revision()):
            return  # the compare-and-set fails: someone wrote since
        lease_epoch = self.record.epoch if self.record is not None and self.damaged is None else 0
        lease_epoch = 0 if self.claims else lease_epoch
        epoch = max(self.max_epoch, m.memory.max_epoch, lease_epoch) + 1
        if self.start_over and epoch > m.memory.max_epoch + 1:  # `Elector._fresher`: a lease never seen
            m.memory = replace(m.memory, max_epoch=epoch - 1, seen_at=m.local(self.now), seen_ttl=TIMING.ttl)
            if m.memory.leader_epoch is not None:
                m.memory = replace(m.memory, leader_epoch=None, renewed_at=None)
            return
        self.max_epoch = epoch
        self.claims.append(m.node)
        took = self.share_rng.uniform(*self.faults.claim)
        over = read.record if read.status == "valid" and read.record is not None else None
        after = (over.node, over.epoch) if over is not None and over.released else None
        self.at(self.now + took, m.node, "claimed", (m.node, epoch, cause, m.local(self.now), after))

    def _claimed(self, data: object) -> None:
        node, epoch, cause, now, after = data  # type: ignore[misc]
        m = self.members[node]
        self.claims.remove(node)
        self.damaged = None
        rec = LeaseRecord(kmsn=KMSN, station=m.node, ip="10.0.0.1", port=9530, pid=1, epoch=epoch,
                          lease_until="20990101000000", node=m.node, renew_seq=0,
                          ttl_s=TIMING.ttl)  # fmt: skip
        self.record, self.revision = rec, self.revision + 1
        m.book.taken(epoch, cause, self.count(m), after, now)
        right = m.book.right
        self.lease_starts += right is not None and right.clean_start and right.mode == LEASE
        m.memory = replace(m.memory, leader_epoch=epoch, renewed_at=now, renew_seq=0, seen_key=rec.key,
                           seen_at=now, seen_ttl=TIMING.ttl, seen_released=False, seen_handoff=None,
                           max_epoch=epoch)  # fmt: skip
        self.elections.append((self.now, m.node, epoch, cause or ""))

    def renew(self, m: Member, read: LeaseRead) -> None:
        mem = m.memory
        now = m.local(self.now)
        assert mem.leader_epoch is not None and mem.renewed_at is not None
        if self.claims or read.revision != self.lease_revision() \
                or now - mem.renewed_at > TIMING.deadline:  # fmt: skip
            return  # the lock held, changed since the read, or the fence: never write after the deadline
        rec = self.record if self.record is not None and self.damaged is None else None
        assert rec is None or rec.epoch <= (mem.leader_epoch or 0), (rec, m.node, mem)
        seq = mem.renew_seq + 1  # a damaged, deleted or stale lease: the leader rewrites its own record
        epoch = mem.leader_epoch
        self.record = LeaseRecord(kmsn=KMSN, station=m.node, ip="10.0.0.1", port=9530, pid=1, epoch=epoch,
                                  lease_until="20990101000000", node=m.node, renew_seq=seq,
                                  ttl_s=TIMING.ttl)  # fmt: skip
        self.revision, self.damaged = self.revision + 1, None
        m.memory = replace(mem, renewed_at=now, renew_seq=seq, seen_key=(m.node, epoch, seq), seen_at=now)

    # -- the relay ---------------------------------------------------------------------------------
    def gate_until(self, m: Member) -> float | None:
        """`Elector.leader_valid_until`: the renew deadline, bounded by the serving right."""
        mem = m.memory
        if mem.leader_epoch is None or mem.renewed_at is None or mem.leader_epoch == m.fenced:
            return None
        now = m.local(self.now)
        until = mem.renewed_at + TIMING.deadline
        bound = m.book.bound(mem.leader_epoch, self.count(m), now)
        m.book.told(mem.leader_epoch)  # the gate is read live here: published at once
        return until if bound is None else min(until, bound)

    def publish(self, m: Member) -> None:
        """After each of m's events: the gate its relay reads from now on (while it leads)."""
        until = self.gate_until(m)
        if until is None:
            return  # not leading: its relay runs on to the deadline it was given
        epoch, deadline = m.memory.leader_epoch or 0, m.real(until)
        if m.pub is not None:
            old_epoch, old_deadline, since = m.pub
            lag = RELAY_LAG if deadline < old_deadline else 0.0
            self.interval(m, old_epoch, since, min(old_deadline, self.now + lag))
        m.pub = (epoch, deadline, self.now)

    def interval(self, m: Member, epoch: int, start: float, end: float) -> None:
        """[start, end) of serving, less the freezes, cut at a power loss, plus the last byte's lag."""
        for n, at in self.faults.power:
            if n == m.node:
                end = min(end, at)
        pieces = [(start, end)]
        for n, a, b in self.faults.freezes:
            if n == m.node:
                pieces = [p for lo, hi in pieces for p in ((lo, min(hi, a)), (max(lo, b), hi)) if p[1] > p[0]]
        for lo, hi in pieces:
            if hi > lo + EMPTY:  # a gate shut as it was published (`until` = now) serves nothing
                self.intervals.append((m.node, epoch, lo, hi + GATE_LAG))

    # -- answers ---------------------------------------------------------------------------------------
    def overlaps(self) -> list[tuple[tuple[str, int, float, float], tuple[str, int, float, float]]]:
        found = []
        ordered = sorted(self.intervals, key=lambda i: i[2])
        for i, a in enumerate(ordered):
            for b in ordered[i + 1 :]:
                if b[2] >= a[3]:
                    break
                if a[0] != b[0]:  # two relays: one node moving to its next epoch is one relay
                    found.append((a, b))
        return found

    def served_at(self, t: float) -> set[str]:
        return {node for node, _, a, b in self.intervals if a <= t < b}

    def first_served_after(self, t: float, other_than: str | None = None) -> float | None:
        starts = [a for node, _, a, b in self.intervals if b > t and node != other_than]
        return max(t, min(starts)) if starts else None


def scenario(seed: int, n: int | None = None, until: float = 60.0) -> tuple[int, Faults]:
    """A random pool of 3–5 members and what befalls it."""
    rng = random.Random(seed)
    n = n or rng.choice((3, 4, 5))
    nodes = [f"S{i + 1:03d}" for i in range(n)]
    f = Faults(loss=rng.choice((0.0, 0.1, 0.3, 0.5)), delay=rng.choice((0.0, 0.02, 0.1)))
    f.rates = {node: 1 + rng.uniform(-DRIFT, DRIFT) for node in nodes}
    for _ in range(rng.randint(0, 6)):
        a = rng.uniform(5, until - 5)
        f.freezes.append((rng.choice(nodes), a, a + rng.choice((0.3, 0.5, 1.0, 1.6, 2.5, 4.0, 12.0))))
    for _ in range(rng.randint(0, 3)):
        a = rng.uniform(5, until - 5)
        f.cuts.append((rng.choice(nodes), a, a + rng.uniform(1, 15)))
    for _ in range(rng.randint(0, 3)):
        a = rng.uniform(5, until - 5)
        side = frozenset(rng.sample(nodes, rng.randint(1, n - 1)))
        f.partitions.append((side, a, a + rng.uniform(0.5, 10)))
    if rng.random() < 0.3:
        f.power.append((rng.choice(nodes), rng.uniform(5, until - 5)))
    # A writer of the share without the key: junk over the lease, or the lease deleted, now and then —
    # with members blind (frozen, cut) for longer than the TTL too: a follower whose first look after
    # its blindness finds no evidence restarts its timer there (`core.lease_memory.blind_gap`).
    f.damage = sorted(rng.uniform(5, until - 5) for _ in range(rng.choice((0, 0, 1, 3, 10))))
    f.deletes = sorted(rng.uniform(5, until - 5) for _ in range(rng.choice((0, 0, 1, 3))))
    # Planned switchovers (relayctl promote, drawn last: what comes before is as it was), now and
    # then in a row, a few seconds apart: a release less than a TTL after an epoch taken on silence.
    promotes = rng.choice((0, 0, 1, 3))
    f.promotes = sorted((rng.uniform(5, until - 5), rng.choice(nodes)) for _ in range(promotes))
    # Releases to no one (SIGTERM, SIGUSR1, a handoff with no successor), fenced like a promote.
    releases = [(rng.uniform(5, until - 5), None) for _ in range(rng.choice((0, 0, 1, 2)))]
    f.promotes = sorted(f.promotes + releases, key=lambda p: p[0])
    return n, f
