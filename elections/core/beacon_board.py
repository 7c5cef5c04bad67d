"""What one member makes of the beacons it receives (docs/design.md §13). Pure:
datagrams, source addresses and this member's own monotonic `now` go in;
verified beacons, per-member arrival statistics and reactions come out.

`BeaconBoard.receive(raw, source, now, standing)`:

1. **Admission** before any parsing: at most `PER_SOURCE` datagrams a second
   from one source address (bursts of as many) and `TOTAL` from everyone; the
   rest are dropped and counted (`too_many`). A flood of 10,000 datagrams a
   second costs a dictionary look-up each, never a parse or an HMAC.
2. **Verification** (`core.beacons.parse_beacon`): size, nesting, fields, KMSN,
   signature. Whatever fails is counted in `refusals` and changes nothing.
3. **Replay**: per `(node, boot)` only a higher `seq` is news; a datagram with
   a `seq` not above the last accepted one is counted (`replayed`) and dropped.
   The last `KEEP_BOOTS` boots of each node are remembered, across a restart
   too: `seqs()` is what the runtime keeps in DATA_DIR, `restore()` takes it
   back (issue 40: a board that forgot took a dead leader's captured beacons,
   sent again, as news).
4. **Statistics** per member (`MemberStats`): loss from the gaps in `seq` of
   its current boot, inter-arrival jitter, last seen on this member's clock.
5. **Reactions** (`Reaction`): what the receiver should do at once, never
   more than reading the store: a leader hearing a leader beacon of a higher
   epoch reads the store (and steps down only if the store agrees); a follower
   hearing `resign`, or a leader beacon whose (node, epoch) differs from the
   lease it last read, reads the lease now; a renewal alone (the same holder
   and epoch, a higher renew_seq) is no reason to read the share: the runtime
   notes when it heard it (`ports.beacons.beacons.BeaconService.heard_at`). Two leader beacons of
   different nodes claiming one epoch raise a `split_brain` security event.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from elections.core.beacons import FOLLOWER, LEADER, RESIGN, Beacon, parse_beacon
from elections.core.evidence import Refusals
from elections.core.untrusted import REPLAYED, SPLIT_BRAIN, TOO_MANY, Untrusted, is_counter

PER_SOURCE = 50.0  # datagrams a second admitted from one source address (members send ~5)
TOTAL = 2000.0  # datagrams a second admitted from everyone together
KEEP_SOURCES = 1024  # source addresses whose budget is tracked (least recently seen dropped)
KEEP_BOOTS = 8  # boots remembered per node, for replay checks
KEEP_MEMBERS = 64  # members tracked (as many member files as the store reads)
KEEP_EPOCHS = 64  # epochs whose leader beacons are remembered, for the split-brain check
JITTER_GAIN = 1 / 16  # RFC 3550's smoothing of inter-arrival jitter
MAX_NAME = 64  # characters of a node or boot name kept across a restart (a boot is 16 hex)


@dataclass(frozen=True)
class Standing:
    """This member's own position when a datagram arrives (from its elector)."""

    node: str
    leader_epoch: int | None = None  # set while this member leads
    seen_key: tuple[str, int, int] | None = None  # the lease it last read: (holder, epoch, renew_seq)
    holder_ip: str | None = None  # the address that lease names
    max_epoch: int = 0  # the highest epoch it knows
    renew_seq: int = 0  # its own last renewal, while it leads

    def outgoing(self) -> tuple[str, int, int]:
        """(role, epoch, renew_seq) of this member's next beacon."""
        if self.leader_epoch is not None:
            return LEADER, self.leader_epoch, self.renew_seq
        if self.seen_key is not None:
            return FOLLOWER, self.seen_key[1], self.seen_key[2]
        return FOLLOWER, self.max_epoch, 0


@dataclass(frozen=True)
class Reaction:
    """Read the store now, because of `why`. `security` marks a split brain."""

    why: str
    security: bool = False


@dataclass
class MemberStats:
    node: str
    boot: str
    source: str  # the address its datagrams come from (one-way paths show here)
    last: Beacon
    first_seq: int
    received: int = 1
    first_at: float = 0.0
    last_at: float = 0.0
    gap: float = 0.0  # smoothed seconds between arrivals
    jitter: float = 0.0  # smoothed deviation of the arrival gaps, seconds
    leader_at: float | None = None  # last leader beacon of this boot

    @property
    def loss(self) -> float:
        """Share of this boot's datagrams that never arrived (0..1)."""
        expected = self.last.seq - self.first_seq + 1
        return max(0.0, 1.0 - self.received / expected) if expected > 0 else 0.0

    def to_doc(self, now: float) -> dict[str, Any]:
        return {
            "node": self.node,
            "boot": self.boot,
            "source": self.source,
            "role": self.last.role,
            "epoch": self.last.epoch,
            "renew_seq": self.last.renew_seq,
            "ip": self.last.ip,
            "received": self.received,
            "loss": round(self.loss, 4),
            "jitter_s": round(self.jitter, 4),
            "gap_s": round(self.gap, 4),
            "age_s": round(now - self.last_at, 3),
            **({"store": self.last.store} if self.last.store else {}),  # the store it says it uses
        }


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class BeaconBoard:
    kmsn: str
    key: str
    node: str  # this member: its own datagrams (broadcast comes back) are skipped
    refusals: Refusals = field(default_factory=Refusals)
    members: OrderedDict[str, MemberStats] = field(default_factory=OrderedDict)
    accepted: int = 0
    dropped: int = 0
    echoes: int = 0  # our own datagrams come back from our own address (a broadcast): expected
    _seqs: dict[str, OrderedDict[str, int]] = field(default_factory=dict)
    _sources: OrderedDict[str, _Bucket] = field(default_factory=OrderedDict)
    _total: _Bucket | None = None
    _epochs: OrderedDict[int, str] = field(default_factory=OrderedDict)
    _reacted: set[tuple[str, int, int, str]] = field(default_factory=set)
    last_accepted: Beacon | None = None  # the beacon the last `receive` accepted (None: it refused)
    _flooding: set[str] = field(default_factory=set)  # sources whose drops are noted already (`flooded`)

    # -- input --------------------------------------------------------------------
    def receive(self, raw: bytes, source: str, now: float, standing: Standing) -> Reaction | None:
        """One datagram from `source`; what to do at once, if anything."""
        self.last_accepted = None
        if not self._admit(source, now):
            self.dropped += 1
            flooded(self.refusals, self._flooding, f"beacon from {source}", "datagrams", PER_SOURCE, now)
            return None
        try:
            beacon = parse_beacon(raw, self.key, self.kmsn)
        except Untrusted as exc:
            self._refuse(source, exc.cause, exc.detail, now)
            return None
        if beacon.node == self.node:
            return None  # our own broadcast, come back
        if not self._fresh(beacon):
            self._refuse(source, REPLAYED, f"replayed {beacon.describe()} seq {beacon.seq}", now)
            return None
        self.accepted += 1
        self.last_accepted = beacon
        self._count(beacon, source, now)
        return self._react(beacon, source, now, standing)

    def mine(self, raw: bytes, source: str, own_ip: str, now: float) -> None:
        """One of our own last datagrams, byte for byte, from `source`. From our own
        address it is our broadcast come back (counted as an echo); from any other it
        is someone sending our beacon again: a replay, refused and counted."""
        if source == own_ip:
            self.echoes += 1
            return
        if not self._admit(source, now):
            self.dropped += 1
            flooded(self.refusals, self._flooding, f"beacon from {source}", "datagrams", PER_SOURCE, now)
            return
        self._refuse(source, REPLAYED, f"our own beacon ({len(raw)} bytes) sent again from {source}", now)

    # -- queries ------------------------------------------------------------------
    def leader_beacon(self, node: str) -> MemberStats | None:
        """The member's stats if its latest beacon says it leads (of its current boot)."""
        stats = self.members.get(node)
        return stats if stats is not None and stats.leader_at is not None else None

    def heard_from(self, node: str, now: float, within: float) -> bool:
        stats = self.members.get(node)
        return stats is not None and now - stats.last_at <= within

    def to_doc(self, now: float) -> dict[str, Any]:
        return {
            "members": {n: s.to_doc(now) for n, s in self.members.items()},
            "accepted": self.accepted,
            "dropped": self.dropped,
            "echoes": self.echoes,
        }

    # -- kept across a restart ----------------------------------------------------
    def seqs(self) -> dict[str, dict[str, int]]:
        """The highest seq accepted per node and boot (oldest boot first), for `restore`."""
        return {node: dict(boots) for node, boots in self._seqs.items()}

    def restore(self, doc: Any) -> int:
        """Take back what `seqs()` gave before a restart (read from DATA_DIR through the guarded
        reader): each (node, boot)'s seq, which a beacon must exceed to be news. Never lowers
        a seq known; entries of another shape are skipped, at most as many nodes and boots as
        the board keeps. How many (node, boot) seqs were taken."""
        if not isinstance(doc, dict):
            return 0
        taken = 0
        for node, boots in list(doc.items())[-KEEP_MEMBERS * 2 :]:
            if not (isinstance(node, str) and 0 < len(node) <= MAX_NAME and isinstance(boots, dict)):
                continue
            for boot, seq in list(boots.items())[-KEEP_BOOTS:]:
                if not (isinstance(boot, str) and 0 < len(boot) <= MAX_NAME and is_counter(seq)):
                    continue
                known = self._seqs.setdefault(node, OrderedDict())
                known[boot] = max(seq, known.get(boot, -1))
                while len(known) > KEEP_BOOTS:
                    known.popitem(last=False)
                taken += 1
        while len(self._seqs) > KEEP_MEMBERS * 2:
            self._seqs.pop(next(iter(self._seqs)))
        return taken

    # -- steps --------------------------------------------------------------------
    def _admit(self, source: str, now: float) -> bool:
        """One address's flood spends its own budget only, never everyone's."""
        bucket = self._sources.pop(source, None) or _Bucket(PER_SOURCE, now)
        self._sources[source] = bucket
        while len(self._sources) > KEEP_SOURCES:
            self._sources.popitem(last=False)
        if not _take(bucket, now, PER_SOURCE):
            return False
        total = self._total or _Bucket(TOTAL, now)
        self._total = total
        if not _take(total, now, TOTAL):
            return False
        self._flooding.discard(source)  # admitted: its next drop starts a new run, noted again
        return True

    def _refuse(self, source: str, cause: str, detail: str, now: float) -> None:
        self.refusals.note(f"beacon from {source}", cause, detail, now=now)

    def _fresh(self, beacon: Beacon) -> bool:
        boots = self._seqs.setdefault(beacon.node, OrderedDict())
        last = boots.pop(beacon.boot, -1)
        if beacon.seq <= last:
            boots[beacon.boot] = last
            return False
        boots[beacon.boot] = beacon.seq
        while len(boots) > KEEP_BOOTS:
            boots.popitem(last=False)
        while len(self._seqs) > KEEP_MEMBERS * 2:
            self._seqs.pop(next(iter(self._seqs)))
        return True

    def _count(self, beacon: Beacon, source: str, now: float) -> None:
        stats = self.members.pop(beacon.node, None)
        if stats is None or stats.boot != beacon.boot:
            stats = MemberStats(beacon.node, beacon.boot, source, beacon, beacon.seq, first_at=now,
                                last_at=now)  # fmt: skip
        else:
            gap = now - stats.last_at
            if stats.received > 1:
                stats.jitter += (abs(gap - stats.gap) - stats.jitter) * JITTER_GAIN
                stats.gap += (gap - stats.gap) * JITTER_GAIN * 2
            else:
                stats.gap = gap
            stats.received += 1
            stats.last, stats.last_at, stats.source = beacon, now, source
        stats.leader_at = now if beacon.role == LEADER else None
        self.members[beacon.node] = stats  # most recent last
        while len(self.members) > KEEP_MEMBERS:
            self.members.popitem(last=False)

    def _react(self, beacon: Beacon, source: str, now: float, me: Standing) -> Reaction | None:
        if beacon.role == LEADER:
            other = self._epochs.get(beacon.epoch)
            if other is not None and other != beacon.node:
                detail = f"{beacon.node} and {other} both send leader beacons of epoch {beacon.epoch}"
                self._refuse(source, SPLIT_BRAIN, detail, now)
                return Reaction(f"SECURITY: {detail}", security=True)
            self._epochs[beacon.epoch] = beacon.node
            while len(self._epochs) > KEEP_EPOCHS:
                self._epochs.popitem(last=False)
        if me.leader_epoch is not None:
            if beacon.role == LEADER and beacon.epoch > me.leader_epoch:
                return self._once(beacon, f"{beacon.node} beacons as leader of epoch {beacon.epoch} "
                                          f"> my {me.leader_epoch}: reading the store")  # fmt: skip
            if beacon.role == LEADER and beacon.epoch == me.leader_epoch:
                detail = f"{beacon.node} beacons as leader of my own epoch {beacon.epoch}"
                self._refuse(source, SPLIT_BRAIN, detail, now)
                return Reaction(f"SECURITY: {detail}", security=True)
            return None
        seen = me.seen_key
        if beacon.role == RESIGN and (seen is None or beacon.epoch >= seen[1]):
            return self._once(beacon, f"{beacon.node} resigns epoch {beacon.epoch}: reading the lease")
        # The same holder and epoch renewed (or not): what the follower read still holds.
        renewal = seen is not None and (beacon.node, beacon.epoch) == seen[:2] and beacon.renew_seq >= seen[2]
        if beacon.role == LEADER and (seen is None or beacon.epoch >= seen[1]) and not renewal:
            return self._once(beacon, f"{beacon.node} beacons epoch {beacon.epoch} seq "
                                          f"{beacon.renew_seq}: the lease changed")  # fmt: skip
        return None

    def _once(self, beacon: Beacon, why: str) -> Reaction | None:
        """React once to a given (node, epoch, renew_seq, role): a store that lags
        behind a beacon is not read again at every datagram."""
        key = (beacon.node, beacon.epoch, beacon.renew_seq, beacon.role)
        if key in self._reacted:
            return None
        if len(self._reacted) > 256:
            self._reacted.clear()
        self._reacted.add(key)
        return Reaction(why)


def flooded(refusals: Refusals, flooding: set[str], source: str, what: str, rate: float, now: float) -> None:
    """Count one datagram dropped for want of budget (`too_many`); the first of a run of drops
    from one source is noted with its source, as every refusal is, so that an alarm says what
    was refused and from where (issue 42: a `too_many` alarm came with `"recent": []`). The rest
    of the run is counted only: a flood costs a set look-up each, never a string built."""
    key = source.rsplit(" ", 1)[-1]
    if key in flooding:
        refusals.counts[TOO_MANY] = refusals.counts.get(TOO_MANY, 0) + 1
        return
    if len(flooding) >= KEEP_SOURCES:
        flooding.clear()
    flooding.add(key)
    refusals.note(source, TOO_MANY, f"more than {rate:g} {what} a second from {key}: dropped unread", now=now)


def _take(bucket: _Bucket, now: float, rate: float) -> bool:
    """A token bucket of `rate` a second holding at most `rate` tokens."""
    bucket.tokens = min(rate, bucket.tokens + max(0.0, now - bucket.at) * rate)
    bucket.at = now
    if bucket.tokens < 1.0:
        return False
    bucket.tokens -= 1.0
    return True
