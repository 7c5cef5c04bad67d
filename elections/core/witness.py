"""The share's witness (issue 38): the third vote of a pool of two, kept in the store. Pure: no
I/O, no clock reads; every time is the caller's own boot clock, passed in. The rules W1-W7 and
their safety argument are in the docs ("The share's witness: fast takeover in a pool of two");
SPIN checks them (`verify/witness.pml`).

Vocabulary:

- `WitnessRecord` — the record `{v, kmsn, node, epoch, relies, sig}` (a file beside the lease,
  `relay_witness.json`; on etcd the key `pool/witness`), signed like the lease.
  `parse_witness()` never raises: anything but a valid record of this pool is no evidence.
- `WitnessTiming` — `V` (`window`: a refresh keeps the holder's vote this long from its send
  time) and `D` (`wait`: a claimant counts the witness only this long after its claim returned,
  when the record it replaced was relied on), from `BEACON_INTERVAL` as the serving right's.
- `WitnessVote` — one holder's vote from the witness for one epoch: entered or claimed, the
  send time of its newest refresh that found its own record, from when it counts.
- the verdicts on a record read: `may_name` (W1), `may_enter` (W2), `refresh_ok` (W3, W6),
  `may_claim_witness` (W4c).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from elections.core.lease import canonical_json, sign, signature_ok
from elections.core.serving import ACKED, DRIFT, GATE_LAG, Adherence, ServingTiming
from elections.core.untrusted import (
    BAD_FIELD,
    FORGED,
    REPLAYED,
    UNSIGNED,
    Limits,
    Untrusted,
    is_counter,
    load_object,
)

WITNESS_VERSION = 1
WITNESS = Limits(4 << 10, max_depth=2)  # a flat object of five short fields: 4 KiB is plenty
WINDOW_INTERVALS = 3  # V in beacon intervals (0.6 s at 0.2 s)
MEMBERS = 2  # the only pool size that uses the witness (three or more: rules 1-6)
WRONG_POOL = "wrong_kmsn"

Status = Literal["valid", "missing", "refused"]


@dataclass(frozen=True)
class WitnessTiming:
    interval: float  # BEACON_INTERVAL
    window: float  # V, on the holder's clock from a refresh's send time
    wait: float  # D, on the claimant's clock from its claim's return
    silence: float  # S, the serving right's
    enter_left: float  # a leader relies on the witness once its acks' window has less than this left

    @classmethod
    def of(cls, interval: float, drift: float = DRIFT) -> WitnessTiming:
        v = WINDOW_INTERVALS * interval
        return cls(interval, v, wait_for(v, drift), ServingTiming.of(interval, drift).silence, v + interval)


def wait_for(window: float, drift: float = DRIFT) -> float:
    """The least safe D for a window V: V on the holder's slowest clock and the relay's last
    byte, against D on the claimant's fastest (the docs' argument, step 4)."""
    return (1 + drift) * (window / (1 - drift) + GATE_LAG)


# -- the record -------------------------------------------------------------------------------
@dataclass(frozen=True)
class WitnessRecord:
    kmsn: str
    node: str
    epoch: int
    relies: bool = False  # its holder counts the witness's vote for this epoch (never set back)

    def to_doc(self) -> dict[str, Any]:
        return {"v": WITNESS_VERSION, "kmsn": self.kmsn, "node": self.node, "epoch": self.epoch,
                "relies": self.relies}  # fmt: skip

    def encode(self, key: str) -> bytes:
        doc = self.to_doc()
        return canonical_json(dict(doc, sig=sign(doc, key)))

    def describe(self) -> str:
        return f"{self.node} epoch {self.epoch}{' (relied on)' if self.relies else ''}"


@dataclass(frozen=True)
class WitnessRead:
    status: Status
    record: WitnessRecord | None = None
    revision: str = ""  # what a compare-and-set over this read compares on
    cause: str = ""  # why it is no evidence (`refused`)
    detail: str = ""

    @property
    def valid(self) -> bool:
        return self.status == "valid" and self.record is not None


def parse_witness(raw: bytes | None, key: str, kmsn: str, floor: int = 0, revision: str = "") -> WitnessRead:
    """What a reader may make of the bytes found: a valid record of this pool, signed with the
    pool key, of an epoch no lower than `floor` (the highest this reader read: a lower one is a
    replay) — or no evidence, with its cause. Never raises."""
    if raw is None:
        return WitnessRead("missing", revision=revision)
    try:
        doc = load_object(raw, WITNESS, "witness record")
        if "sig" not in doc:
            raise Untrusted(UNSIGNED, "witness record is not signed")
        if not signature_ok(doc, key):
            raise Untrusted(FORGED, "witness record's signature does not verify")
        node, epoch, relies = doc.get("node"), doc.get("epoch"), doc.get("relies")
        if not isinstance(node, str) or not node or not is_counter(epoch) or not isinstance(relies, bool):
            raise Untrusted(BAD_FIELD, "witness record lacks node, epoch or relies")
        if doc.get("v") != WITNESS_VERSION:
            raise Untrusted(BAD_FIELD, f"witness record of version {doc.get('v')!r}")
        if doc.get("kmsn") != kmsn:
            raise Untrusted(WRONG_POOL, "witness record of another KMSN")
        if epoch < floor:
            raise Untrusted(REPLAYED, f"witness record of epoch {epoch} below {floor} already read")
    except Untrusted as exc:
        return WitnessRead("refused", revision=revision, cause=exc.cause, detail=exc.detail)
    return WitnessRead("valid", WitnessRecord(kmsn, node, int(epoch), relies), revision)


# -- the verdicts on one read -------------------------------------------------------------------
def may_name(read: WitnessRead, epoch: int) -> bool:
    """W1: a member that just took `epoch` (not by a claim) may write its own record, relies
    false, over anything but a valid record of an epoch >= its own (junk and no file are
    rewritten, as the lease's are)."""
    return not (read.valid and read.record is not None and read.record.epoch >= epoch)


def may_enter(read: WitnessRead, node: str, epoch: int) -> bool:
    """W2: a leader relies on the witness only by compare-and-set over its own valid record of
    its own epoch; anything else (another node, a higher epoch, junk, no file) may hide a claim."""
    rec = read.record
    return read.valid and rec is not None and (rec.node, rec.epoch) == (node, epoch)


def refresh_ok(read: WitnessRead, node: str, epoch: int) -> bool:
    """W3, W6: a refresh is good only if the record names exactly this node, this epoch, relied on."""
    rec = read.record
    return read.valid and rec is not None and (rec.node, rec.epoch, rec.relies) == (node, epoch, True)


def may_claim_witness(read: WitnessRead, holder_epoch: int) -> bool:
    """W4c: a follower claims only over a valid record of an epoch no higher than the holder's
    it judged silent; a record that is no evidence leaves the TTL path to run on."""
    return read.valid and read.record is not None and read.record.epoch <= holder_epoch


def must_step_down(read: WitnessRead, epoch: int) -> bool:
    """W6: a valid record of a higher epoch: the leader reads the lease at once (rule 3e)."""
    return read.valid and read.record is not None and read.record.epoch > epoch


# -- one holder's vote ---------------------------------------------------------------------------
@dataclass
class WitnessVote:
    """The witness's vote for one (node, epoch) as its holder counts it."""

    node: str
    epoch: int
    timing: WitnessTiming
    relies: bool = False  # entered (W2) or claimed (W4)
    ready: bool = False  # the record named this (node, epoch): W1 written, or claimed
    refreshed: float = float("-inf")  # send time of the newest refresh that found our own record
    counts_from: float = float("-inf")  # W5: from when a claimant counts the vote

    @classmethod
    def claimed(cls, node: str, epoch: int, timing: WitnessTiming, sent_at: float, returned_at: float,
                replaced: WitnessRecord) -> WitnessVote:  # fmt: skip
        """W4, W5: a claim sent at `sent_at` (the first refresh) returned at `returned_at`, over
        `replaced`: counted at once if its holder did not rely on it, else `D` after the return."""
        wait = timing.wait if replaced.relies else 0.0
        return cls(node, epoch, timing, relies=True, ready=True, refreshed=sent_at,
                   counts_from=returned_at + wait)  # fmt: skip

    def to_doc(self, now: float) -> dict[str, Any]:
        until = self.until(now)
        return {"epoch": self.epoch, "ready": self.ready, "relies": self.relies,
                "counts_s": None if until is None else round(until - now, 3),
                "waits_s": round(max(0.0, self.counts_from - now), 3)}  # fmt: skip

    def entered(self, sent_at: float) -> None:
        """W2: the entry's compare-and-set, sent at `sent_at`, was written."""
        self.relies = True
        self.refreshed = max(self.refreshed, sent_at)

    def refresh(self, sent_at: float, read: WitnessRead, leading: int | None) -> bool:
        """W3: a refresh sent at `sent_at` returned `read`; it counts only while this member still
        leads this epoch (a refresh returning after a step-down moves nothing: the model found
        two relays without this). True if the vote moved."""
        if not self.relies or leading != self.epoch or not refresh_ok(read, self.node, self.epoch):
            return False
        if sent_at <= self.refreshed:
            return False
        self.refreshed = sent_at
        return True

    def until(self, now: float) -> float | None:
        """Until when the witness's vote counts (None: not now, nor from a past refresh)."""
        if not self.relies or now < self.counts_from:
            return None
        end = self.refreshed + self.timing.window
        return end if end > now else None

    def opens_at(self, now: float) -> float | None:
        """When a claimed vote that waits out `D` (W5) starts to count, if that is still ahead
        of `now`; None if it counts already or never waits. The gate may open then: its
        keeper publishes it at that instant, not at the next refresh that happens to follow."""
        return self.counts_from if self.relies and now < self.counts_from else None

    def open_until(self) -> float | None:
        """How long a stepped-down holder's gate may still be open by this vote (rule 1's
        step-down wait includes it): the end of its last window, counted or not."""
        return self.refreshed + self.timing.window if self.relies else None

    def should_enter(self, ack_until: float | None, now: float) -> bool:
        """W2's moment: serving by acks whose window has less than `enter_left` left."""
        return not self.relies and ack_until is not None and ack_until - now < self.timing.enter_left

    def should_unrely(self, ack_until: float | None, now: float) -> bool:
        """W2b's moment: relied on, its window over (it counts no more: what the relay was told has
        passed too), and the acks fresh again — say so, so that a claimant need not wait D."""
        fresh = ack_until is not None and ack_until - now >= self.timing.enter_left + self.timing.interval
        return self.relies and now >= self.counts_from and self.until(now) is None and fresh

    def unrely(self, now: float) -> bool:
        """W2b, the book's half: stop counting the witness, if its window is over (True)."""
        if not self.relies or now < self.counts_from or self.until(now) is not None:
            return False
        self.relies = False
        return True

    def needs_refresh(self, last_sent: float | None, ack_until: float | None, now: float,
                      renew_every: float) -> bool:  # fmt: skip
        """Every interval while relied on and the acks' window is short of `V`; else once a
        renewal interval (what the panel and `relayctl doctor` judge the witness by)."""
        if last_sent is None:
            return True
        short = self.relies and (ack_until is None or ack_until - now < self.timing.window)
        return now - last_sent >= (self.timing.interval if short else renew_every)


def silent_pair(holder: str, epoch: int, mine: Adherence | None, timing: WitnessTiming,
                now: float) -> str | None:  # fmt: skip
    """W4a: why a follower of a pool of two may claim the witness over `holder`'s `epoch`, or None.
    It adheres to it, heard it say it serves by acks (which a leader of two says only once the
    witness named it, `ServingBook`), it did not resign, and this member has not heard it for `S`.
    The claim's compare-and-set decides the rest (W4b-c, the elector)."""
    if mine is None or (mine.node, mine.epoch) != (holder, epoch):
        return None
    if mine.mode != ACKED or not mine.paired or mine.resigned:
        return None  # a leader that did not say `pair` may count a third member's acks: not this path
    quiet = mine.quiet(now)
    if quiet < timing.silence:
        return None
    return (f"{holder} silent for {quiet:.2f} s ≥ S {timing.silence:.2f} s; "
            "2 members: the share's witness decides")  # fmt: skip


class WitnessClaims(Protocol):
    """The witness as the elector asks it (`runtime.witness_keeper.WitnessKeeper`)."""

    def claims(self, holder: str, epoch: int) -> bool:
        """An early takeover of (`holder`, `epoch`) needs the witness (W4): it said `pair`."""

    def claim(self, holder: str, epoch: int, claim_epoch: int) -> str | None:
        """W4: claim the witness from `holder`'s silent `epoch`; None if claimed, else why not."""

    def name(self, epoch: int) -> None:
        """W1: this member took `epoch` (not by a claim): the record names it."""


WITH_WITNESS = "2 members + the share's witness"


def fast_takeover(serving: Any) -> str | None:
    """What a pool's fast takeover of a silent leader rests on, from the serving right's document
    (`ServingBook.to_doc`) as the API says it: "2 members + the share's witness", "3 members" (or
    more), or None (the TTL path: beacons off, fewer members, no witness)."""
    if not isinstance(serving, dict) or serving.get("fast") is not True:
        return None
    members = serving.get("members")
    if not isinstance(members, int) or isinstance(members, bool):
        return None
    return WITH_WITNESS if members == MEMBERS else f"{members} members"
