"""The beacons' side of the serving right (docs/design.md §15, `core.serving`): its book, asked under
the lock.

`ServingRight` is mixed into `ports.beacons.BeaconService`: the election thread
asks it what the book says (`taken`, `serving_*`, `silent`), and its silence loop
runs on the service's event loop (it also says when the holder went `quiet`, for
the pool view). It uses the service's `book`, `board`, `lock`, `members`,
`gate_clock`, `monotonic`, `quiet` and `on_quiet`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import replace

from elections.core.beacon_board import BeaconBoard, Reaction, Standing
from elections.core.serving import ACKED, Report
from elections.core.serving_book import ServingBook
from elections.core.witness import WitnessRead, WitnessVote
from elections.ports.beacon_liveness import HalfConfig

log = logging.getLogger("stkrelay.beacons")

SILENT_KICK_EVERY = 0.5  # seconds between cycles kicked while a majority's silence holds
# Seconds the silence loop may sleep at most when no silence can hold before (`silence_wait`):
# a machine suspended meanwhile (its monotonic clock stood, the book's boot clock ran on) looks
# again this long after it wakes at the latest.
SILENCE_LOOK_CAP = 0.5
SILENCE_LOOK_LATE = 0.005  # seconds after that first instant: the first look finds `S` passed
# A holder none of whose beacons came for this many intervals is `quiet` (0.6 s at 0.2 s): long
# before the silence `S` that may end its lease, the station door stops dialling it for new
# connections (a frozen host's kernel still completes their handshakes) and holds them instead.
QUIET_INTERVALS = 3.0


class ServingRight:
    """The serving-right half of `BeaconService`: the book's answers, and the majority's silence."""

    # What it uses of the service (set in `BeaconService.__init__`).
    config: HalfConfig
    book: ServingBook
    board: BeaconBoard
    standing: Callable[[], Standing]
    lock: threading.Lock
    members: Callable[[], int]
    gate_clock: Callable[[], float]
    monotonic: Callable[[], float]
    _silent_told: tuple[str, int] | None
    _silent_at: float
    quiet: str | None
    on_quiet: Callable[[], None]
    send_now: Callable[[], None]
    _hand: Callable[[Reaction], None]

    # -- the serving right (core.serving), for the election thread ---------------------------
    def taken(self, epoch: int, cause: str | None, after: tuple[str, int] | None = None) -> None:
        """This member took `epoch` (over the lease of (node, epoch) `after`): its right starts
        now, and its first leader beacon goes at once."""
        members = self.members()
        with self.lock:
            self.book.taken(epoch, cause, members, after, self.gate_clock())
        self.send_now()

    def serving_fenced(self, epoch: int) -> None:
        """The relay of `epoch` stopped before its planned release: the resign may say so."""
        with self.lock:
            self.book.fenced(epoch)

    def serving_bound(self, epoch: int) -> float | None:
        members = self.members()
        with self.lock:
            return self.book.bound(epoch, members, self.gate_clock())

    def serving_lapsed(self, epoch: int) -> str | None:
        members = self.members()
        with self.lock:
            return self.book.lapsed(epoch, members, self.gate_clock())

    def serving_mode(self, epoch: int | None) -> str | None:
        with self.lock:
            return self.book.mode(epoch)

    def serving_told(self, epoch: int) -> None:
        with self.lock:
            self.book.told(epoch)

    def serving_untold(self, epoch: int | None) -> bool:
        with self.lock:
            return self.book.untold(epoch)

    # -- the share's witness (issue 38, core.witness), for the election thread and its keeper ------
    def witness_claims(self, holder: str, epoch: int) -> bool:
        with self.lock:
            return self.book.claims_from(holder, epoch)

    def witness_named(self, epoch: int) -> None:
        with self.lock:
            self.book.witness_named(epoch)

    def witness_claim(self, vote: WitnessVote, holder: str | None = None) -> None:
        with self.lock:
            self.book.witness_claim(vote, holder)

    def witness_look(self, epoch: int) -> tuple[WitnessVote, float | None] | None:
        """A copy of the witness's vote for our `epoch` and our acks' window, if a pool of two
        relies (or may come to rely) on it; None otherwise."""
        members = self.members()
        with self.lock:
            book, right = self.book, self.book.right
            if right is None or right.epoch != epoch or not book.paired(members) or book.witness is None:
                return None
            if right.mode != ACKED:
                return None
            return replace(book.witness), right.ack_until(*right.counted(members))

    def witness_entered(self, epoch: int, sent_at: float) -> None:
        with self.lock:
            w = self.book.witness
            if w is not None and w.epoch == epoch:
                w.entered(sent_at)

    def witness_unrelied(self, epoch: int, now: float) -> bool:
        """W2b: stop counting the witness for `epoch` if its window is over (then say so on the share)."""
        with self.lock:
            w = self.book.witness
            return w is not None and w.epoch == epoch and w.unrely(now)

    def witness_refreshed(self, epoch: int, sent_at: float, read: WitnessRead, leading: int | None) -> bool:
        with self.lock:
            w = self.book.witness
            return w is not None and w.epoch == epoch and w.refresh(sent_at, read, leading)

    def silent(self, holder: str, epoch: int) -> str | None:
        """Why a majority's silence lets this follower take `holder`'s `epoch` early, or None."""
        members = self.members()
        with self.lock:
            now = self.monotonic()
            reports = [Report(s.node, now - s.last_at, s.last.ack_node, s.last.ack_epoch,
                              s.last.quiet_ms / 1000) for s in self.board.members.values()]  # fmt: skip
            return self.book.silent(holder, epoch, members, reports, self.gate_clock())

    def silence_wait(self) -> float:
        """Seconds until the silence loop looks again: half an interval while a silence may
        hold, as before; until just after the first instant one may (`ServingBook.silence_from`:
        the adhered leader was heard within `S`) while none can, up to `SILENCE_LOOK_CAP`.
        The first look after that instant comes 5 ms after it, where it came up to half an
        interval after it; an idle agent's loop wakes twice a second, not ten times (issue 41)."""
        with self.lock:
            now = self.gate_clock()
            left = self.book.silence_from(now) - now
        if left <= 0:
            return self.config.interval / 2
        wait = min(left, SILENCE_LOOK_CAP) + SILENCE_LOOK_LATE
        quiet_in = self._quiet_in()
        return wait if quiet_in is None else min(wait, quiet_in + SILENCE_LOOK_LATE)

    def _quiet_in(self) -> float | None:
        """Seconds until the followed holder turns `quiet` if no beacon of it comes meanwhile
        (None: none followed, never heard, or quiet already): the loop's sleep ends then, so the
        station doors hear of a quiet holder `QUIET_INTERVALS` after its last beacon, not up to
        `SILENCE_LOOK_CAP` later."""
        if self.quiet is not None:
            return None
        st = self.standing()
        if st.leader_epoch is not None or st.seen_key is None:
            return None
        with self.lock:
            stats = self.board.members.get(st.seen_key[0])
            if stats is None:
                return None
            left = stats.last_at + QUIET_INTERVALS * self.config.interval - self.monotonic()
        return max(left, 0.0)

    def _look_quiet(self, holder: str | None) -> None:
        """`quiet`: the holder this follower follows, once none of its beacons came for
        `QUIET_INTERVALS` (a holder never heard is not quiet: its beacons may be off); each
        change is told (`on_quiet`), so the pool view says it within one look."""
        quiet = None
        if holder is not None:
            with self.lock:
                stats = self.board.members.get(holder)
                age = None if stats is None else self.monotonic() - stats.last_at
            if age is not None and age >= QUIET_INTERVALS * self.config.interval:
                quiet = holder
        if quiet != self.quiet:
            if quiet is not None:
                log.info("beacon: %s quiet (no beacon for %g intervals): station doors hold new connections",
                         quiet, QUIET_INTERVALS)  # fmt: skip
            else:
                log.info("beacon: %s no longer quiet", self.quiet)
            self.quiet = quiet
            try:
                self.on_quiet()
            except Exception:  # the runtime's trouble must not stop the beacons
                log.exception("telling a quiet holder failed")

    async def _silence_loop(self) -> None:
        """A follower looks at the majority's silence about its holder twice an
        interval once it may hold (`core.serving.silent_holder`; `silence_wait`); while it
        holds, one cycle is run at once and again every `SILENT_KICK_EVERY` (a cycle busy
        with a slow share, or a lost race, must not leave the takeover to the next poll).
        The elector asks again, and the store decides."""
        while True:
            await asyncio.sleep(self.silence_wait())
            st = self.standing()
            self._look_quiet(None if st.leader_epoch is not None or st.seen_key is None else st.seen_key[0])
            if st.leader_epoch is not None or st.seen_key is None:
                continue
            node, epoch = st.seen_key[0], st.seen_key[1]
            why = self.silent(node, epoch)
            now = self.monotonic()
            if not why or (self._silent_told == (node, epoch) and now - self._silent_at < SILENT_KICK_EVERY):
                continue
            if self._silent_told != (node, epoch):
                log.warning("%s", why)
            self._silent_told, self._silent_at = (node, epoch), now
            self._hand(Reaction(why))
