"""The beacons' side of the serving right (DESIGN.md §15, `core.serving`): its book, asked under the lock.

`ServingRight` is mixed into `ports.beacons.BeaconService`: the election thread
asks it what the book says (`taken`, `serving_*`, `silent`), and its silence loop
runs on the service's event loop. It uses the service's `book`, `board`, `lock`,
`members`, `gate_clock` and `monotonic`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from elections.core.beacon_board import Reaction
from elections.core.serving import ACKED, Report
from elections.core.witness import WitnessRead, WitnessVote

log = logging.getLogger("stkrelay.beacons")

SILENT_KICK_EVERY = 0.5  # seconds between cycles kicked while a majority's silence holds


class ServingRight:
    """The serving-right half of `BeaconService`: the book's answers, and the majority's silence."""

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

    async def _silence_loop(self) -> None:
        """A follower looks at the majority's silence about its holder twice an
        interval (`core.serving.silent_holder`); while it holds, one cycle is run at
        once and again every `SILENT_KICK_EVERY` (a cycle busy with a slow share, or a
        lost race, must not leave the takeover to the next poll). The elector asks
        again, and the store decides."""
        while True:
            await asyncio.sleep(self.config.interval / 2)
            st = self.standing()
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
