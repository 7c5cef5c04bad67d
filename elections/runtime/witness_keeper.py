"""The share's witness, kept (issue 38; the rules are `core.witness`, W1-W7): the store's side of a
pool of two's third vote. One agent's keeper does what the rules leave to I/O:

- `name(epoch)` (W1, the election thread): a member that took an epoch writes its own record,
  `relies` false, over anything but a valid record of that epoch or a higher one.
- `claim(holder, epoch, claim_epoch)` (W4, the election thread, before the lease's compare-and-set
  of an early takeover): read the record; claim it by compare-and-set only over a valid record of
  an epoch no higher than the silent holder's; the vote goes to the book (`witness_claim`), timed
  from the write's send and its return (W5). Anything else: no takeover, the TTL decides.
- its thread (the leader; a follower's sleeps until `kick()`ed by its leadership): while the book
  serves by acks in a pool of two, enter (W2) when the acks' window runs low, and refresh (W3) — a
  read — every interval while it relies on the witness without fresh acks, else once a
  `LEASE_RENEW`. A refresh that moved the vote publishes the gate; a record of a higher epoch runs
  a cycle at once (W6, rule 3e).

Every time is the gate's clock (`CLOCK_BOOTTIME`), as the book's. What the store holds is judged
by the one guarded reader (`PoolStore.read_witness`): no evidence is never an exception here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from elections.core.beacon_board import Reaction
from elections.core.witness import (
    WitnessRead,
    WitnessRecord,
    WitnessTiming,
    WitnessVote,
    may_claim_witness,
    may_enter,
    may_name,
    must_step_down,
    refresh_ok,
)
from elections.errors import StoreUnavailable
from elections.ports.store.backend import WriteOutcome
from elections.ports.store.store import LeaseStore

log = logging.getLogger("stkrelay.witness")

OPEN_LAG = 0.001  # s past a claim's wait end the keeper looks: the book counts the vote from then on


class WitnessBook(Protocol):
    """What the keeper asks of the serving right's book (`ports.beacons.beacons.BeaconService`)."""

    def members(self) -> int: ...

    def witness_claims(self, holder: str, epoch: int) -> bool: ...

    def witness_named(self, epoch: int) -> None: ...

    def witness_claim(self, vote: WitnessVote, holder: str | None = None) -> None: ...

    def witness_look(self, epoch: int) -> tuple[WitnessVote, float | None] | None: ...

    def witness_entered(self, epoch: int, sent_at: float) -> None: ...

    def witness_refreshed(
        self, epoch: int, sent_at: float, read: WitnessRead, leading: int | None
    ) -> bool: ...

    def witness_unrelied(self, epoch: int, now: float) -> bool: ...


class WitnessKeeper:
    def __init__(
        self, store: LeaseStore, kmsn: str, node: str, book: WitnessBook, timing: WitnessTiming,
        leading: Callable[[], int | None], publish: Callable[[], None], react: Callable[[Reaction], None],
        renew_every: float, gate_clock: Callable[[], float],
    ) -> None:  # fmt: skip
        self.store = store
        self.kmsn = kmsn
        self.node = node
        self.book = book
        self.timing = timing
        self.leading = leading
        self.publish = publish
        self.react = react
        self.renew_every = renew_every
        self.gate_clock = gate_clock
        self.last_sent: float | None = None  # the send time of our last refresh read (gate clock)
        self.last_epoch: int | None = None
        # W5: when our claimed vote, waiting out D, starts to count (gate clock): the gate is
        # published then, not at whichever refresh returns next (up to an interval and a read later)
        self._opens: float | None = None
        # our last claim's vote: a claim whose lease compare-and-set lost (BUSY, CHANGED) is retried
        # over our own record, timed as the first (its D counts from the first claim's return)
        self._claimed: WitnessVote | None = None
        self.state: dict[str, Any] = {}  # what the panel and `relayctl doctor` show
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._thread = threading.Thread(target=self._run, name="witness", daemon=True)

    def start(self) -> WitnessKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()

    def claims(self, holder: str, epoch: int) -> bool:
        return self.book.witness_claims(holder, epoch)

    def _note(self, ok: bool, why: str) -> None:
        self.state = {"ok": ok, "why": why, "at": self.gate_clock()}

    def to_doc(self) -> dict[str, Any]:
        """Its last write or refresh: ok, why, and how long ago (this agent's clock); {} before any."""
        state = dict(self.state)
        at = state.pop("at", None)
        if isinstance(at, float):
            state["age_s"] = round(self.gate_clock() - at, 3)
        return state

    # -- the election thread ---------------------------------------------------------------------
    def name(self, epoch: int) -> None:
        """W1: the record names our new `epoch` (relies false), if nothing newer is there."""
        try:
            read = self.store.read_witness(self.kmsn)
            if not may_name(read, epoch):
                self._note(False, f"the witness record names a newer epoch ({_what(read)})")
                return
            record = WitnessRecord(self.kmsn, self.node, epoch, relies=False)
            outcome = self.store.write_witness(record, read.revision)
        except StoreUnavailable as exc:
            self._note(False, f"the witness record cannot be written: {exc}")
            log.warning("witness record for epoch %d not written: %s", epoch, exc)
            return
        if outcome is not WriteOutcome.WRITTEN:
            self._note(False, f"the witness record was not written ({outcome.value})")
            return
        self.book.witness_named(epoch)
        self._note(True, f"the witness record names epoch {epoch}")

    def claim(self, holder: str, epoch: int, claim_epoch: int) -> str | None:
        """W4: claim the witness from `holder`'s silent `epoch` for `claim_epoch`. None: claimed
        (the vote is in the book); else why not, and nothing was written."""
        try:
            read = self.store.read_witness(self.kmsn)
            mine = self._claimed
            ours = WitnessRecord(self.kmsn, self.node, claim_epoch, relies=True)
            if read.valid and read.record == ours and mine is not None and mine.epoch == claim_epoch:
                self.book.witness_claim(mine, holder)  # our own claim still stands: the lease's CAS again
                return None
            if not may_claim_witness(read, epoch) or read.record is None:
                return f"the witness record is {_what(read)}"
            record = WitnessRecord(self.kmsn, self.node, claim_epoch, relies=True)
            sent = self.gate_clock()
            outcome = self.store.write_witness(record, read.revision)
            returned = self.gate_clock()
        except StoreUnavailable as exc:
            return f"the witness cannot be claimed: {exc}"
        if outcome is not WriteOutcome.WRITTEN:
            return f"the witness claim lost ({outcome.value})"
        self._claimed = WitnessVote.claimed(self.node, claim_epoch, self.timing, sent, returned, read.record)
        self.book.witness_claim(self._claimed, holder)
        replaced = read.record.describe()
        log.warning("claimed the share's witness for epoch %d over %s (%s)", claim_epoch, replaced,
                    "waiting D before it counts" if read.record.relies else "it counts at once")  # fmt: skip
        self._note(True, f"claimed for epoch {claim_epoch}")
        return None

    # -- the leader's thread ---------------------------------------------------------------------
    def step(self) -> None:
        """One look: enter or refresh if the rules say so now."""
        epoch = self.leading()
        look = None if epoch is None else self.book.witness_look(epoch)
        if epoch is None or look is None:
            self._opens = None  # no vote of ours to wait for
            return
        vote, ack_until = look
        if epoch != self.last_epoch:
            self.last_epoch, self.last_sent, self._opens = epoch, None, None
        now = self.gate_clock()
        if vote.should_enter(ack_until, now):
            self._enter(epoch, now)
        elif vote.should_unrely(ack_until, now):
            self._unrely(epoch, now)
        elif vote.needs_refresh(self.last_sent, ack_until, now, self.renew_every):
            self._refresh(epoch, now)
        self._open_after_wait(vote, now)

    def _open_after_wait(self, vote: WitnessVote, now: float) -> None:
        """W5: a claim's vote that waited out D counts from now: publish the gate at once (the
        book counts it from `counts_from` whoever asks; this only asks on time)."""
        opens = vote.opens_at(now)
        if opens is not None:
            self._opens = opens
        elif self._opens is not None:
            self._opens = None
            self.publish()

    def next_look(self) -> float:
        """Seconds until the next look: half an interval, or sooner when a claim's wait ends."""
        every = self.timing.interval / 2
        opens = self._opens
        if opens is None:
            return every
        return min(every, max(0.0, opens - self.gate_clock()) + OPEN_LAG)

    def _enter(self, epoch: int, sent: float) -> None:
        try:
            read = self.store.read_witness(self.kmsn)
            if not may_enter(read, self.node, epoch):
                self._note(False, f"cannot rely on the witness: the record is {_what(read)}")
                self._higher(read, epoch)
                return
            outcome = self.store.write_witness(
                WitnessRecord(self.kmsn, self.node, epoch, True), read.revision
            )
        except StoreUnavailable as exc:
            self._note(False, f"the witness cannot be refreshed: {exc}")
            return
        if outcome is WriteOutcome.WRITTEN:
            self.book.witness_entered(epoch, sent)
            self.last_sent = sent
            self._note(True, f"relied on for epoch {epoch}")
            self.publish()

    def _unrely(self, epoch: int, now: float) -> None:
        """W2b: the book stops counting the witness first (its window is over), then the record says
        so by compare-and-set over our own relied record: a claimant after it need not wait D. A
        failed write leaves the record relied on (a claimant waits D: never less safe)."""
        if not self.book.witness_unrelied(epoch, now):
            return
        try:
            read = self.store.read_witness(self.kmsn)
            if not refresh_ok(read, self.node, epoch):
                self._higher(read, epoch)
                return
            record = WitnessRecord(self.kmsn, self.node, epoch, relies=False)
            outcome = self.store.write_witness(record, read.revision)
        except StoreUnavailable as exc:
            self._note(False, f"the witness cannot be refreshed: {exc}")
            return
        if outcome is WriteOutcome.WRITTEN:
            self._note(True, f"relied on no more for epoch {epoch}: the acks are fresh")

    def _refresh(self, epoch: int, sent: float) -> None:
        self.last_sent = sent
        try:
            read = self.store.read_witness(self.kmsn)
        except StoreUnavailable as exc:
            self._note(False, f"the witness cannot be refreshed: {exc}")
            return
        if self.book.witness_refreshed(epoch, sent, read, self.leading()):
            self.publish()
        ours = (
            read.valid
            and read.record is not None
            and (read.record.node, read.record.epoch) == (self.node, epoch)
        )
        self._note(ours, "refreshed" if ours else f"the witness record is {_what(read)}")
        self._higher(read, epoch)

    def _higher(self, read: WitnessRead, epoch: int) -> None:
        if must_step_down(read, epoch) and read.record is not None:
            self.react(
                Reaction(f"the share's witness names epoch {read.record.epoch} > {epoch}: reading the lease")
            )

    def kick(self) -> None:
        """This agent leads (its leadership was just published): look now, and from now on every
        half interval. A follower's keeper has nothing to look at, and waits for this."""
        self._kick.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._kick.clear()  # before `leading()`: a kick after it wakes the wait below
            if self.leading() is None and self._opens is None:  # a follower: asleep until it leads
                self._kick.wait(self.renew_every)  # (issue 41), looked at once a LEASE_RENEW all the same
            else:
                self._stop.wait(self.next_look())  # half an interval, or when a claim's wait of D ends
            if self._stop.is_set():
                return
            try:
                self.step()
            except Exception:  # the next look tries again
                log.exception("witness look failed")


def _what(read: WitnessRead) -> str:
    if read.valid and read.record is not None:
        return f"held by {read.record.describe()}"
    if read.status == "missing":
        return "missing"
    return f"no evidence ({read.cause})"
