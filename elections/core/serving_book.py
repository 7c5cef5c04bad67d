"""One member's book of the serving right (docs/design.md §15; the rules are `core.serving`), as
its beacons see it: the leader it adheres to, and while it leads, its own right and how it began.
Pure: every time is the caller's own clock (the gate's), passed in; its transport
(`ports.beacons.beacons`) calls it under one lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from elections.core.beacons import RESIGN, Beacon
from elections.core.serving import (
    ACKED,
    ACKED_FROM_START,
    DRIFT,
    GATE_LAG,
    HANDED,
    LEASE,
    MIN_MEMBERS,
    RELEASED,
    AckReport,
    Adherence,
    ServingRight,
    ServingTiming,
    adhere,
    right_for_election,
    said_acks,
    silent_holder,
    starts_acked,
)
from elections.core.witness import MEMBERS as PAIR
from elections.core.witness import WitnessTiming, WitnessVote, silent_pair


# -- one member's book, as its beacons see it --------------------------------------------------------
@dataclass
class ServingBook:
    """What one member's beacons keep for the serving right: the leader it adheres
    to, and while it leads, its own right. Its transport (`ports.beacons.beacons`) calls
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
    # The share's witness (issue 38, a pool of two): its vote for our right's epoch, and a claim's
    # vote made before the lease's compare-and-set took the epoch (`taken` attaches it).
    witness: WitnessVote | None = None
    claimed: WitnessVote | None = None
    claimed_from: str | None = None
    taken_at: float = float("-inf")  # when our right's epoch was taken (this book's clock)

    @property
    def witness_timing(self) -> WitnessTiming:
        return WitnessTiming.of(self.timing.interval)

    def paired(self, members: int) -> bool:
        """A pool of two whose witness record named our right's epoch: `ACKED` mode is possible."""
        w, right = self.witness, self.right
        if w is None or right is None or w.epoch != right.epoch or not w.ready:
            return False
        return members == PAIR or right.partner is not None  # once a pair, a pair for the epoch

    def _follows_pair(self, members: int) -> bool:
        """A follower of two whose leader says it serves by acks: which a leader of two says only
        once the witness named its epoch (`paired`): this follower's takeover is the fast one."""
        adh = self.adherence
        return members == PAIR and adh is not None and adh.mode == ACKED and adh.paired and not adh.resigned

    def _witness_until(self, members: int, now: float) -> float | None:
        return self.witness.until(now) if self.witness is not None and self.paired(members) else None

    def _holds_by_witness(self, members: int, now: float) -> float | None:
        """The witness's vote, as it keeps a right from lapsing: for a TTL (on the slowest clock)
        after the follower's acks ended (or the epoch began, never acked). Past that the follower is
        gone for good (a counter PC off for the night): the leader requalifies into `LEASE` mode
        (rule 4) instead of refreshing the witness every interval for hours."""
        until = self._witness_until(members, now)
        right = self.right
        if until is None or right is None:
            return None
        acks = right.ack_until(*right.counted(members))
        since = self.taken_at if acks is None else acks
        return until if now - since <= self.ttl * (1 + DRIFT) / (1 - DRIFT) else None

    def claims_from(self, holder: str, epoch: int) -> bool:
        """An early takeover of (`holder`, `epoch`) must claim the witness: it said `pair`."""
        adh = self.adherence
        return adh is not None and adh.paired and (adh.node, adh.epoch) == (holder, epoch)

    def witness_named(self, epoch: int) -> None:
        """W1: the record names our new `epoch` (relies false): the pool of two may serve by acks."""
        if self.right is not None and self.right.epoch == epoch:
            self.witness = WitnessVote(self.node, epoch, self.witness_timing, ready=True)

    def witness_claim(self, vote: WitnessVote, holder: str | None = None) -> None:
        """W4: this member's claim of the witness for `vote.epoch` from silent `holder` returned;
        the lease's compare-and-set follows (`taken`). The holder is the new epoch's partner."""
        self.claimed = vote
        self.claimed_from = holder

    # When this book began (its process started: the caller's clock). A member's adherence is
    # lost with its process, not the acks it sent before: it may have acked a leader just before
    # it stopped, who may still count it. So for S from its start it acks no newly heard leader
    # and its own vote waits too (rule 1 across a restart; SPIN's trail: issue 37).
    started: float = float("-inf")

    def _fresh(self, now: float) -> bool:
        """Within S of its start, with no leader adhered to since: as if it adhered to one unknown."""
        return self.adherence is None and now - self.started < self.timing.silence

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
        elif acked and self._fresh(now):
            right.self_from = self.started + self.timing.silence  # whom it acked before its start
        if not acked and not clean and cause in ACKED_FROM_START:
            # `LEASE` only for want of members (fewer than three counted): an earlier holder taken
            # over on silence may still serve, so this epoch's own release is not clean for a TTL.
            right.lease_ok_at = now + self.ttl * (1 + DRIFT) / (1 - DRIFT)
        self.right = right
        self.taken_at = now
        claimed, self.claimed = self.claimed, None
        self.witness = (
            claimed if claimed is not None and claimed.epoch == epoch and cause == "silent" else None
        )
        if self.witness is not None:
            right.partner = self.claimed_from  # a pair's epoch from its first instant (issue 38)

    def overwritten(self, epoch: int, now: float) -> None:
        """Our record of `epoch` was found replaced by one an older epoch's holder wrote since
        (`lease_memory.writes_still`): that holder renews on — a renewal without the lock renamed
        over our claim, docs/election.md "Renewing without the lock" — and its gate may be open by
        acks until its renew deadline. No earlier gate is shut for good before a TTL from now
        (with the drift) has passed: `lease_ok_at` starts again, so neither our release is clean
        (rule 6) nor a lapse falls back to the lease (rule 4) before then (SPIN's second trail of
        the lockless renewal, issue 37: a clean handoff taken in `LEASE` mode beside it)."""
        right = self.right
        if right is not None and right.epoch == epoch:
            right.lease_ok_at = max(right.lease_ok_at, now + self.ttl * (1 + DRIFT) / (1 - DRIFT))

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
            right.settle(members, now, self.paired(members))
            doc: dict[str, object] = {"serve": ACKED if right.mode == ACKED and right.told else LEASE}
            if doc["serve"] == ACKED and self.paired(members):
                doc["pair"] = 1  # issue 38: only a follower that heard this may claim the witness
            return doc
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
        until = right.ack_until(*right.counted(members))
        w = self.witness  # its witness window, counted or not (W3: rule 1's step-down wait includes it)
        seen = w.open_until() if w is not None and w.epoch == right.epoch else None
        if seen is not None:
            until = seen if until is None else max(until, seen)
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
        if self._fresh(now):  # an unknown leader heard at its start: sticky for S (rule 1)
            unknown = Adherence("", 0, "", 0, self.started)
            kept = adhere(unknown, b.node, b.role, b.epoch, b.boot, b.seq, b.serve or LEASE, now,
                          self.timing.silence, floor, paired=b.pair == 1)  # fmt: skip
            self.adherence = None if kept is unknown else kept
        else:
            self.adherence = adhere(self.adherence, b.node, b.role, b.epoch, b.boot, b.seq, b.serve or LEASE,
                                    now, self.timing.silence, floor, paired=b.pair == 1)  # fmt: skip
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
        return right.until(members, now, self.paired(members), self._witness_until(members, now))

    def lapsed(self, epoch: int, members: int, now: float) -> str | None:
        right = self.right
        if (
            right is None
            or right.epoch != epoch
            or not right.lapsed(members, now, self._holds_by_witness(members, now))
        ):
            return None
        until = right.ack_until(*right.counted(members))
        when = "no majority ever" if until is None else f"majority lost {now - until:.2f} s ago"
        return f"no majority of {members} members within W {right.window:g} s: {when}"

    def mode(self, epoch: int | None) -> str | None:
        right = self.right
        return right.mode if right is not None and epoch is not None and right.epoch == epoch else None

    def told(self, epoch: int) -> bool:
        """The gate of `epoch` in `ACKED` mode was published: our beacons may say so. True
        the first time (the caller beacons at once: a follower's early takeover needs
        `serve: ack` heard, rule 3a, and until then a freeze of this leader is the TTL's)."""
        right = self.right
        if right is None or right.epoch != epoch or right.mode != ACKED or right.told:
            return False
        right.told = True
        return True

    def untold(self, epoch: int | None) -> bool:
        """`ACKED` mode that our beacons do not say yet: the gate should be published."""
        right = self.right
        return right is not None and right.epoch == epoch and right.mode == ACKED and not right.told

    def silent(
        self, holder: str, epoch: int, members: int, reports: list[AckReport], now: float
    ) -> str | None:
        adh = self.adherence
        if adh is not None and adh.paired and (adh.node, adh.epoch) == (holder, epoch):
            # W4a: the holder said `pair`: its votes are itself, its partner and the share's witness,
            # whatever this member counts now; only a claim of the witness takes it over early
            return silent_pair(holder, epoch, adh, self.witness_timing, now)
        if members == PAIR:
            return None  # two members, the holder never said `pair`: the TTL path
        return silent_holder(holder, epoch, self.adherence, reports, members, self.timing, now)

    def said_acks(self, holder: str, epoch: int) -> bool:
        """Whether evidence of `holder`'s death may count (`core.serving.said_acks`)."""
        return said_acks(holder, epoch, self.adherence)

    def silence_from(self, now: float) -> float:
        """The earliest instant `silent` may name a holder: `S` after the adhered leader was last
        heard (`silent_holder` wants that quiet first). Adherence moves only on a beacon heard,
        which sets `heard_at` to that moment, never earlier: a leader adhered to later (or a
        first one, while none is) is heard at or after `now`, and its `S` ends later still."""
        adh = self.adherence
        return (now if adh is None else adh.heard_at) + self.timing.silence

    def to_doc(self, members: int, now: float) -> dict[str, object]:
        adh, right = self.adherence, self.right
        acks = {} if right is None else {n: round(now - t, 3) for n, t in right.acks.items()}
        return {
            "window_s": round(self.timing.window, 3), "silence_s": round(self.timing.silence, 3),
            "members": members,
            "fast": members >= MIN_MEMBERS or self.paired(members) or self._follows_pair(members),
            "witness": None if self.witness is None else self.witness.to_doc(now),
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

    def overwritten(self, epoch: int, now: float) -> None:
        """Our record of `epoch` was found replaced by one an older epoch's holder wrote since:
        no earlier gate is shut for good before a TTL from now (`ServingBook.overwritten`)."""

    def bound(self, epoch: int, now: float) -> float | None:
        """The latest instant the right lets this node serve `epoch`; None: the lease alone."""

    def lapsed(self, epoch: int, now: float) -> str | None:
        """Why the right to serve `epoch` lapsed for good, or None."""

    def silent(self, holder: str, epoch: int) -> str | None:
        """Why a majority's silence lets this follower take over `holder`'s `epoch` early, or None."""
