"""The serving right (DESIGN.md §15; the rule and its safety argument are in
the README, "The serving right (DESIGN §15), as built"). Pure: every time is
the caller's own monotonic clock, passed in.

The lease decides who holds an epoch; the serving right decides whether its
holder may serve *now*. Three pieces, one per role:

- `ServingRight` (the leader): which of its own leader beacons each member
  acknowledged, and so until when a majority of the pool has heard it within
  `W`. In `ACKED` mode the relay gate is `min(renew deadline, ack_until())`;
  in `LEASE` mode (a pool of fewer than three, a sole survivor, the first
  seconds of an epoch taken by the TTL or from a clean release: `clean`,
  `starts_acked`) it is the renew deadline alone, as before. `LEASE` becomes
  `ACKED` at the first majority of acks, never back within the epoch: a
  leader whose acks lapse takes a new epoch for itself (`lapsed()`, the
  elector's `REQUALIFY`) once nobody else can still serve.
- `Adherence` / `adhere()` (every member): the one leader a member
  acknowledges. It is sticky — the PreVote part: a member that heard leader
  (L, E) within `S` acknowledges no other leader, whatever the store says,
  unless L resigned. Never an epoch below what the member knows.
- `silent_holder()` (a follower): the early takeover of a holder whose
  beacons stopped: this member and a majority of the pool (itself included)
  have not heard it for `S`, and the holder had said it serves by acks.

`ServingTiming.of(interval)` derives `W` and `S` from `BEACON_INTERVAL`:
`S > W (1 + DRIFT) / (1 - DRIFT) + one jittered interval + GATE_LAG`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Protocol

from elections.core.beacons import RESIGN, Beacon

LEASE, ACKED = "lease", "ack"
MODES = (LEASE, ACKED)
MIN_MEMBERS = 3  # below this no majority of others can exist: the TTL path, as before
DRIFT = 0.01  # assumed bound on any two clocks' rate difference from real time (±1 %)
WINDOW_INTERVALS = 7.5  # W in beacon intervals (1.5 s at 0.2 s): acks survive 30 % loss
JITTER = 0.2  # beacons are sent every interval ±20 % (ports.beacons)
GATE_LAG = 0.05  # seconds between the gate's deadline and the relay's last forwarded byte
KEEP_SENT = 128  # own leader beacons remembered (their send times), for acks to name
KEEP_ACKERS = 64


@dataclass(frozen=True)
class ServingTiming:
    interval: float  # BEACON_INTERVAL
    window: float  # W: a majority's acks keep the gate open this long (leader's clock)
    silence: float  # S: a member is quiet about a leader after this long (its own clock)

    @classmethod
    def of(cls, interval: float, drift: float = DRIFT, window: float | None = None) -> ServingTiming:
        w = WINDOW_INTERVALS * interval if window is None else window
        return cls(interval, w, silence_for(w, interval, drift))


def silence_for(window: float, interval: float, drift: float = DRIFT) -> float:
    """The least safe S for a window W: W measured on the fastest-gaining clock
    against S on the slowest, plus a jittered interval and the relay's lag."""
    return window * (1 + drift) / (1 - drift) + interval * (1 + JITTER) + GATE_LAG


def majority(members: int) -> int:
    return members // 2 + 1


# -- the leader ------------------------------------------------------------------------------
@dataclass
class ServingRight:
    """One leader's right to serve for one (epoch, boot) of its beacons."""

    epoch: int
    boot: str
    window: float
    mode: str = LEASE
    lease_ok_at: float = 0.0  # before this, a lapse must not fall back to the lease (see lapsed())
    sent: OrderedDict[int, float] = field(default_factory=OrderedDict)  # own beacon seq -> sent at
    acks: dict[str, float] = field(default_factory=dict)  # member -> send time of the newest seq it acked
    # `ACKED` is said in our beacons only once the gate it implies was published (`told`):
    # until then followers must not take over early, for the relay still reads the lease's deadline.
    told: bool = False
    fenced: bool = False  # its relay stopped before a planned release (runtime.agent_roles._fence)
    # From when this leader's own vote counts in its majority: a member that acked another leader
    # it heard within S before it took this epoch may still be in that leader's majority (rule 1:
    # it would have switched only after S of silence). `ServingBook.taken` sets it.
    self_from: float = float("-inf")
    self_wait: tuple[str, int, str] | None = None  # (node, epoch, boot) it waits out; its resign ends it
    clean_start: bool = False  # taken from a clean release: in `LEASE` mode at once (README rule 6)

    def sent_beacon(self, seq: int, now: float) -> None:
        self.sent[seq] = now
        while len(self.sent) > KEEP_SENT:
            self.sent.popitem(last=False)

    def acked(self, node: str, epoch: int, boot: str, seq: int) -> bool:
        """A member's beacon acknowledges our leader beacon `seq` of (epoch, boot).
        True if that is news (a newer beacon of ours than it had acked)."""
        if epoch != self.epoch or boot != self.boot:
            return False
        at = self.sent.get(seq)
        if at is None or at <= self.acks.get(node, float("-inf")):
            return False
        self.acks[node] = at
        if len(self.acks) > KEEP_ACKERS:
            self.acks.pop(min(self.acks, key=self.acks.__getitem__))
        return True

    def ack_until(
        self, members: int, within: frozenset[str] | None = None, now: float | None = None
    ) -> float | None:
        """Until when a majority of `members` (this leader counts itself, from `self_from`)
        has heard one of our beacons sent within W; None if no majority ever acked. Asked
        `now` before `self_from`, a majority of others alone, or one that lasts until then."""
        need = majority(members) - 1
        if need <= 0:
            return None
        times = sorted((t for n, t in self.acks.items() if within is None or n in within), reverse=True)
        with_self = times[need - 1] + self.window if len(times) >= need else None
        if now is None or now >= self.self_from or with_self is None:
            return with_self
        others = times[need] + self.window if len(times) > need else None
        if others is None or others < now:
            return None
        return with_self if others >= self.self_from else others

    def settle(self, members: int, now: float) -> str:
        """`LEASE` becomes `ACKED` once a majority acks (three members or more); never back."""
        if self.mode == LEASE and members >= MIN_MEMBERS:
            until = self.ack_until(members, now=now)
            if until is not None and until > now:
                self.mode = ACKED
        return self.mode

    def until(self, members: int, now: float) -> float | None:
        """The bound the serving right puts on the relay gate now: None in `LEASE`
        mode (the renew deadline alone), else the end of the majority's window
        (`now` or earlier when there is none: shut)."""
        if self.settle(members, now) == LEASE:
            return None
        until = self.ack_until(members, now=now)
        return now if until is None else until

    def clean(self, now: float) -> bool:
        """Every gate of an epoch before this one is shut for good (`lease_ok_at` passed: no
        earlier holder's renew deadline is left, and none can renew), and this epoch's own
        relay stopped before its release: a taker of the released lease may serve by the
        lease from its first instant (`starts_acked`)."""
        return self.fenced and now >= self.lease_ok_at

    def lapsed(self, members: int, now: float) -> bool:
        """Serving by acks, no majority within W, and no earlier holder can still serve
        by the lease (`lease_ok_at`): time to take a new epoch in `LEASE` mode."""
        if self.mode != ACKED or now < self.lease_ok_at:
            return False
        until = self.ack_until(members, now=now)
        return until is None or until <= now


# Causes of an election (core.decide) after which the new epoch serves by acks from the start.
ACKED_FROM_START = ("silent", "released", "handoff", "handoff_lapsed")
RELEASED = ("released", "handoff", "handoff_lapsed")  # of those, the causes that take a released lease
HANDED = ("handoff", "handoff_lapsed")  # of those, a lease that names a target: fenced before it was written


def starts_acked(cause: str | None, members: int, clean_release: bool = False) -> bool:
    """Whether an epoch taken for `cause` in a pool of `members` serves by acks from
    its first instant. Taken on silence: the old holder may still be heard by others
    and serve by their acks. Taken from a release: the releaser shut its gate, but a
    holder before it may have been taken over on silence less than a TTL ago and be
    heard again — unless the releaser said otherwise (`clean_release`: its resign beacon
    said `fenced`, `ServingRight.clean`: every earlier gate was shut for good by then).
    Taken on the TTL, on evidence of death, first, or to requalify: the lease alone
    already shut every earlier gate (`LEASE` until a majority acks)."""
    if cause in RELEASED and clean_release:
        return False
    return cause == "silent" or (cause in ACKED_FROM_START and members >= MIN_MEMBERS)


def right_for_election(epoch: int, boot: str, timing: ServingTiming, acked: bool, now: float,
                       ttl: float) -> ServingRight:  # fmt: skip
    """The right of a freshly taken epoch (`acked`: see `starts_acked`). Serving by acks
    from the start, it may fall back to the lease only after a TTL, when every
    earlier holder's renew deadline has certainly passed."""
    if acked:
        # Its gate is shut until acks come: nothing to publish before the beacons say ACKED.
        after = now + ttl * (1 + DRIFT) / (1 - DRIFT)
        return ServingRight(epoch, boot, timing.window, ACKED, lease_ok_at=after, told=True)
    return ServingRight(epoch, boot, timing.window, LEASE, lease_ok_at=now)


# -- every member -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Adherence:
    """The one leader this member acknowledges, and when it last heard it."""

    node: str
    epoch: int
    boot: str
    seq: int  # the newest leader beacon of (node, epoch, boot) heard
    heard_at: float
    mode: str = LEASE  # what its last beacon said it serves by
    resigned: bool = False

    def quiet(self, now: float) -> float:
        return max(0.0, now - self.heard_at)


def adhere(current: Adherence | None, node: str, role: str, epoch: int, boot: str, seq: int, mode: str,
           now: float, silence: float, floor: int) -> Adherence | None:  # fmt: skip
    """Fold one verified beacon (`role` leader or resign) into the adherence.
    A leader beacon of the adhered (node, epoch, boot) refreshes it; any other
    leader is adopted only if none is adhered to, the adhered one resigned, or
    it has been silent for `silence` — and never below `floor` (the highest
    epoch this member knows) or below the adhered epoch."""
    same = current is not None and (node, epoch, boot) == (current.node, current.epoch, current.boot)
    if role == "resign":
        return replace(current, resigned=True) if same and current is not None else current
    if role != "leader" or epoch < floor:
        return current
    if same and current is not None:
        return replace(current, seq=max(seq, current.seq), heard_at=now, mode=mode)
    if current is not None:
        if epoch < current.epoch:
            return current
        if not current.resigned and now - current.heard_at < silence:
            return current  # sticky: it was heard within S
    return Adherence(node, epoch, boot, seq, now, mode)


# -- a follower ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Report:
    """What another member's latest beacon said about the leader it adheres to."""

    node: str
    age: float  # seconds since that beacon arrived (this member's clock)
    ack_node: str
    ack_epoch: int
    quiet: float  # seconds the sender had not heard it, when it sent


def silent_holder(holder: str, epoch: int, mine: Adherence | None, reports: list[Report], members: int,
                  timing: ServingTiming, now: float) -> str | None:  # fmt: skip
    """Why `holder` of `epoch` may be taken over before its TTL, or None. This
    member adheres to it and heard it say it serves by acks; it has not heard it
    for `S`; and a majority of `members` (this one included) agrees: members
    whose beacon of the last three intervals says they do not hear it for `S`
    either (or adhere to no one, or to someone else)."""
    if members < MIN_MEMBERS or mine is None or (mine.node, mine.epoch) != (holder, epoch):
        return None
    if mine.mode != ACKED or mine.resigned:
        return None  # a holder serving by the lease alone is timed out by the TTL
    quiet = mine.quiet(now)
    if quiet < timing.silence:
        return None
    fresh = 3 * timing.interval * (1 + JITTER)
    agree = [r.node for r in reports
             if r.node != holder and r.age <= fresh
             and ((r.ack_node, r.ack_epoch) != (holder, epoch) or r.quiet >= timing.silence)]  # fmt: skip
    hears = [r.node for r in reports if r.node != holder and r.age <= fresh and r.node not in agree]
    if hears or 1 + len(agree) < majority(members):
        return None
    return (f"{holder} silent for {quiet:.2f} s ≥ S {timing.silence:.2f} s, and so say "
            f"{', '.join(sorted(agree))} ({1 + len(agree)} of {members} members)")  # fmt: skip


# -- one member's book, as its beacons see it --------------------------------------------------------
@dataclass
class ServingBook:
    """What one member's beacons keep for the serving right: the leader it adheres
    to, and while it leads, its own right. Its transport (`ports.beacons`) calls
    it under one lock; `members` is the pool's size as this member counts it."""

    node: str
    boot: str
    timing: ServingTiming
    ttl: float
    adherence: Adherence | None = None
    right: ServingRight | None = None
    switched: bool = False  # the last `heard` made this member adhere to a new leader: ack it now
    # (node, epoch, heard at) of the newest resign that said `fenced`: a claim over that released
    # lease follows it within moments; one more than a TTL later is not taken for its evidence
    clean_release: tuple[str, int, float] | None = None

    def taken(self, epoch: int, cause: str | None, members: int, after: tuple[str, int] | None,
              now: float) -> None:  # fmt: skip
        """This member took `epoch` for `cause` over the lease of (node, epoch) `after`."""
        said = self.clean_release
        clean = (after is not None and said is not None and after == said[:2] and cause in RELEASED
                 and now - said[2] <= self.ttl)  # fmt: skip
        acked = starts_acked(cause, members, clean_release=clean)
        right = right_for_election(epoch, self.boot, self.timing, acked, now, self.ttl)
        right.clean_start = clean and members >= MIN_MEMBERS
        adh = self.adherence
        # A handoff's lease is written only once its leader's relay stopped (`Elector.release`
        # fences first): reading it is as good as that leader's resign. A plain release may be
        # the supervisor's on SIGTERM, written before the relay's gate is shut: not so.
        handed = cause in HANDED and adh is not None and (adh.node, adh.epoch) == after
        left = adh is None or adh.node == self.node or adh.resigned or handed
        if acked and adh is not None and not left:
            # It acked `adh` until it took this epoch (a leader beacon heard at `heard_at`): that
            # leader may still count it. Its own vote counts once it would have switched (rule 1).
            right.self_from = adh.heard_at + self.timing.silence
            right.self_wait = (adh.node, adh.epoch, adh.boot)
        if not acked and not clean and cause in ACKED_FROM_START:
            # `LEASE` only for want of members (fewer than three counted): an earlier holder taken
            # over on silence may still serve, so this epoch's own release is not clean for a TTL.
            right.lease_ok_at = now + self.ttl * (1 + DRIFT) / (1 - DRIFT)
        self.right = right

    def fenced(self, epoch: int) -> None:
        """The relay of `epoch` stopped (or its gate read the shut state) before its release."""
        right = self.right
        if right is not None and right.epoch == epoch:
            right.fenced = True

    def resigning(self, epoch: int, now: float) -> dict[str, object]:
        """The serving field of a resign beacon of `epoch`: `fenced` when a taker of its
        released lease may serve by the lease at once (`ServingRight.clean`)."""
        right = self.right
        clean = right is not None and right.epoch == epoch and right.clean(now)
        return {"fenced": epoch} if clean else {}

    def outgoing(self, leader_epoch: int | None, seq: int, members: int, now: float) -> dict[str, object]:
        """The serving fields of our next beacon (`seq`): a leader's mode (its send
        time remembered, for acks to name), or the leader a follower adheres to."""
        if leader_epoch is not None:
            right = self.right
            if right is None or right.epoch != leader_epoch:
                return {}  # no right for this epoch (not taken through `taken`): says nothing
            right.sent_beacon(seq, now)
            right.settle(members, now)
            return {"serve": ACKED if right.mode == ACKED and right.told else LEASE}
        adh = self.adherence
        if adh is None or self.gate_open(members, now):
            return {}
        return {"ack_node": adh.node, "ack_epoch": adh.epoch, "ack_boot": adh.boot, "ack_seq": adh.seq,
                "quiet_ms": int(adh.quiet(now) * 1000)}  # fmt: skip

    def gate_open(self, members: int, now: float) -> bool:
        """A member that led by acks and stepped down may still have its relay serving until the
        end of the window its last majority gave it (the relay learns of a step-down only from
        its gate's deadline, plus its last byte's lag). Until then it acks no leader — its ack
        would help open another gate while its own may be open (issue 22: an old leader that
        read the new epoch acked it at once, and the new leader's majority was the old one
        itself and one more). On this member's own clock, as its gate's deadline."""
        right = self.right
        if right is None or right.mode != ACKED:
            return False
        until = right.ack_until(members)
        return until is not None and now < until + GATE_LAG

    def heard(self, beacon: Beacon, leader_epoch: int | None, floor: int, now: float) -> bool:
        """Fold one verified beacon of another member. True if it acknowledged one of
        our own leader beacons we had no newer ack of from it (the gate may move).
        `switched` says whether this member now adheres to another leader than before."""
        b, before = beacon, self.adherence
        said = self.clean_release  # the first copy of a resign dates it: a replay does not refresh it
        newer = said is None or b.epoch > said[1] or (b.epoch == said[1] and b.node != said[0])
        if b.role == RESIGN and 0 < b.fenced == b.epoch and newer:  # parse_beacon: fenced is 0 or the epoch
            self.clean_release = (b.node, b.epoch, now)
        self.adherence = adhere(self.adherence, b.node, b.role, b.epoch, b.boot, b.seq, b.serve or LEASE,
                                now, self.timing.silence, floor)  # fmt: skip
        after = self.adherence
        self.switched = after is not None and (before is None or (after.node, after.epoch, after.boot)
                                               != (before.node, before.epoch, before.boot))  # fmt: skip
        right = self.right
        if right is not None and b.role == RESIGN and right.self_wait == (b.node, b.epoch, b.boot):
            right.self_from, right.self_wait = float("-inf"), None  # it resigned: a switch at once (rule 1)
        if leader_epoch is None or right is None or right.epoch != leader_epoch or b.ack_node != self.node:
            return False
        return right.acked(beacon.node, beacon.ack_epoch, beacon.ack_boot, beacon.ack_seq)

    def bound(self, epoch: int, members: int, now: float) -> float | None:
        right = self.right
        if right is None or right.epoch != epoch:
            return now  # an epoch this book never saw taken: shut (never serve blind)
        return right.until(members, now)

    def lapsed(self, epoch: int, members: int, now: float) -> str | None:
        right = self.right
        if right is None or right.epoch != epoch or not right.lapsed(members, now):
            return None
        until = right.ack_until(members)
        when = "no majority ever" if until is None else f"majority lost {now - until:.2f} s ago"
        return f"no majority of {members} members within W {right.window:g} s: {when}"

    def mode(self, epoch: int | None) -> str | None:
        right = self.right
        return right.mode if right is not None and epoch is not None and right.epoch == epoch else None

    def told(self, epoch: int) -> None:
        """The gate of `epoch` in `ACKED` mode was published: our beacons may say so."""
        right = self.right
        if right is not None and right.epoch == epoch and right.mode == ACKED:
            right.told = True

    def untold(self, epoch: int | None) -> bool:
        """`ACKED` mode that our beacons do not say yet: the gate should be published."""
        right = self.right
        return right is not None and right.epoch == epoch and right.mode == ACKED and not right.told

    def silent(self, holder: str, epoch: int, members: int, reports: list[Report], now: float) -> str | None:
        return silent_holder(holder, epoch, self.adherence, reports, members, self.timing, now)

    def to_doc(self, members: int, now: float) -> dict[str, object]:
        adh, right = self.adherence, self.right
        acks = {} if right is None else {n: round(now - t, 3) for n, t in right.acks.items()}
        return {
            "window_s": round(self.timing.window, 3), "silence_s": round(self.timing.silence, 3),
            "members": members, "fast": members >= MIN_MEMBERS,
            "adheres": None if adh is None else {"node": adh.node, "epoch": adh.epoch, "mode": adh.mode,
                                                 "quiet_s": round(adh.quiet(now), 3)},
            "right": None if right is None else {"epoch": right.epoch, "mode": right.mode,
                                                 "clean_start": right.clean_start, "acks": acks},
        }  # fmt: skip


class Serving(Protocol):
    """The serving right as the elector asks it (kept beside the beacons: `runtime.beacon_link`)."""

    def taken(self, epoch: int, cause: str | None, now: float, after: tuple[str, int] | None = None) -> None:
        """This node just took `epoch` (for `cause`, over the lease of (node, epoch) `after`):
        its right starts now."""

    def bound(self, epoch: int, now: float) -> float | None:
        """The latest instant the right lets this node serve `epoch`; None: the lease alone."""

    def lapsed(self, epoch: int, now: float) -> str | None:
        """Why the right to serve `epoch` lapsed for good, or None."""

    def silent(self, holder: str, epoch: int) -> str | None:
        """Why a majority's silence lets this follower take over `holder`'s `epoch` early, or None."""
