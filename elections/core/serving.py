"""The serving right (docs/design.md §15; the rule and its safety argument are in
docs/serving-right.md, "The rules"). Pure: every time is
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

One member's book of all three, as its beacons see it, is `core.serving_book`.

`ServingTiming.of(interval)` derives `W` and `S` from `BEACON_INTERVAL`:
`S > W (1 + DRIFT) / (1 - DRIFT) + one jittered interval + GATE_LAG`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

LEASE, ACKED = "lease", "ack"
MODES = (LEASE, ACKED)
MIN_MEMBERS = 3  # below this no majority of others can exist: the TTL path, as before
DRIFT = 0.01  # assumed bound on any two clocks' rate difference from real time (±1 %)
WINDOW_INTERVALS = 7.5  # W in beacon intervals (1.5 s at 0.2 s): acks survive 30 % loss
JITTER = 0.2  # beacons are sent every interval ±20 % (ports.beacons.beacons)
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
    fenced: bool = False  # its relay stopped before a planned release (runtime.agent.Agent._fence)
    # From when this leader's own vote counts in its majority: a member that acked another leader
    # it heard within S before it took this epoch may still be in that leader's majority (rule 1:
    # it would have switched only after S of silence). `ServingBook.taken` sets it.
    self_from: float = float("-inf")
    self_wait: tuple[str, int, str] | None = None  # (node, epoch, boot) it waits out; its resign ends it
    clean_start: bool = False  # from a clean release: in `LEASE` mode at once (docs/serving-right.md rule 6)
    # Issue 38: the one other member of a pool of two whose acks this epoch counts, fixed when it
    # first serves as a pair (with the share's witness); a third member's acks never count in it.
    partner: str | None = None

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

    def counted(self, members: int) -> tuple[int, frozenset[str] | None]:
        """The members a majority is counted among, and whose acks count: a pair's epoch, its
        partner and itself (with the witness: `ServingBook`), whatever the pool's count now."""
        return (2, frozenset({self.partner})) if self.partner is not None else (members, None)

    def settle(self, members: int, now: float, paired: bool = False) -> str:
        """`LEASE` becomes `ACKED` once a majority acks (three members or more, or two with the
        share's witness naming this epoch: `paired`, issue 38); never back."""
        if self.mode == LEASE and (members >= MIN_MEMBERS or paired):
            if paired and members == 2 and self.partner is None and self.acks:
                self.partner = max(
                    self.acks, key=self.acks.__getitem__
                )  # the pair's other member, for this epoch
            members, within = self.counted(members)
            until = self.ack_until(members, within, now=now)
            if until is not None and until > now:
                self.mode = ACKED
        return self.mode

    def until(
        self, members: int, now: float, paired: bool = False, witness: float | None = None
    ) -> float | None:
        """The bound the serving right puts on the relay gate now: None in `LEASE`
        mode (the renew deadline alone), else the end of the majority's window
        (`now` or earlier when there is none: shut). In a pool of two, `witness` is until
        when the share's witness votes for this epoch (`core.witness.WitnessVote.until`):
        with this leader's own vote a majority of three, from `self_from` only (W3, W5)."""
        if self.settle(members, now, paired) == LEASE:
            return None
        members, within = self.counted(members)
        until = self.ack_until(members, within, now=now)
        if witness is not None and now >= self.self_from:
            until = witness if until is None else max(until, witness)
        return now if until is None else until

    def clean(self, now: float) -> bool:
        """Every gate of an epoch before this one is shut for good (`lease_ok_at` passed: no
        earlier holder's renew deadline is left, and none can renew), and this epoch's own
        relay stopped before its release: a taker of the released lease may serve by the
        lease from its first instant (`starts_acked`)."""
        return self.fenced and now >= self.lease_ok_at

    def lapsed(self, members: int, now: float, witness: float | None = None) -> bool:
        """Serving by acks, no majority within W (nor the share's witness's vote, in a pool of
        two), and no earlier holder can still serve by the lease (`lease_ok_at`): time to take
        a new epoch in `LEASE` mode."""
        if self.mode != ACKED or now < self.lease_ok_at or (witness is not None and witness > now):
            return False
        members, within = self.counted(members)
        until = self.ack_until(members, within, now=now)
        return until is None or until <= now


# Causes of an election (core.decide) after which the new epoch serves by acks from the start.
# `gone` (the holder's process positively dead) shut the holder's gate, not an earlier one's: a
# holder taken on silence less than a TTL ago may still be served by the acks of a member that had
# not yet read its successor (SPIN's trail, docs/serving-right.md "Found by SPIN, third round").
# `older_writer` (the TTL ran out past the bound of an older epoch's holder's restarts): that holder
# may still renew without the lock, its gate open by acks (docs/election.md "Renewing without the lock").
ACKED_FROM_START = ("silent", "gone", "released", "handoff", "handoff_lapsed", "older_writer")
RELEASED = ("released", "handoff", "handoff_lapsed")  # of those, the causes that take a released lease
HANDED = ("handoff", "handoff_lapsed")  # of those, a lease that names a target: fenced before it was written


def starts_acked(cause: str | None, members: int, clean_release: bool = False) -> bool:
    """Whether an epoch taken for `cause` in a pool of `members` serves by acks from
    its first instant. Taken on silence: the old holder may still be heard by others
    and serve by their acks. Taken from a release: the releaser shut its gate, but a
    holder before it may have been taken over on silence less than a TTL ago and be
    heard again — unless the releaser said otherwise (`clean_release`: its resign beacon
    said `fenced`, `ServingRight.clean`: every earlier gate was shut for good by then).
    Taken on evidence of death: as on silence, the holder's gate is shut (its relay died
    with it), an earlier holder's may not be (rule 7). Taken on the TTL, first, or to
    requalify: the lease alone already shut every earlier gate (`LEASE` until a majority acks)."""
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
    paired: bool = False  # its last beacon said `pair`: a leader of two counting the share's witness

    def quiet(self, now: float) -> float:
        return max(0.0, now - self.heard_at)


def adhere(current: Adherence | None, node: str, role: str, epoch: int, boot: str, seq: int, mode: str,
           now: float, silence: float, floor: int, paired: bool = False) -> Adherence | None:  # fmt: skip
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
        return replace(current, seq=max(seq, current.seq), heard_at=now, mode=mode, paired=paired)
    if current is not None:
        if epoch < current.epoch:
            return current
        if not current.resigned and now - current.heard_at < silence:
            return current  # sticky: it was heard within S
    return Adherence(node, epoch, boot, seq, now, mode, paired=paired)


# -- a follower ---------------------------------------------------------------------------------
def said_acks(holder: str, epoch: int, mine: Adherence | None) -> bool:
    """Whether this member adheres to `holder` of `epoch` and heard it say it serves by acks: rule
    7's guard on evidence of death, as rule 3a's on silence. Evidence (a refused connection, a
    silence of beacons) may be forged by an on-path writer of TCP resets; a holder serving by acks
    is shut by the silence of the majority the taker's own `ack` mode waits for, so forged
    evidence reaches no further than dropped beacons do. A holder serving by the lease alone is
    shut only by its renew deadline: evidence or not, the TTL takes it (docs/serving-right.md,
    "Found by SPIN, fourth round")."""
    return mine is not None and (mine.node, mine.epoch) == (holder, epoch) and mine.mode == ACKED


@dataclass(frozen=True)
class AckReport:
    """What another member's latest beacon said about the leader it adheres to."""

    node: str
    age: float  # seconds since that beacon arrived (this member's clock)
    ack_node: str
    ack_epoch: int
    quiet: float  # seconds the sender had not heard it, when it sent


def silent_holder(holder: str, epoch: int, mine: Adherence | None, reports: list[AckReport], members: int,
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
