"""The share's witness kept (`elections.runtime.witness_keeper`, issue 38), in process over the
memory store on an injected clock: a claimant whose vote waits out D (W5) has its gate
published the moment D is over, not at whichever refresh returns next."""

from __future__ import annotations

from dataclasses import replace

import pytest
from memstore import MemoryLeaseStore

from elections.core.witness import WitnessRead, WitnessRecord, WitnessTiming, WitnessVote
from elections.runtime.witness_keeper import OPEN_LAG, WitnessKeeper

KMSN = "9999-9999-99-99"
T = WitnessTiming.of(0.2)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ClaimantBook:
    """The book of a member that claimed the witness for epoch 8 and holds its lease; no acks."""

    def __init__(self, vote: WitnessVote) -> None:
        self.vote = vote

    def members(self) -> int:
        return 2

    def witness_claims(self, holder: str, epoch: int) -> bool:
        return True

    def witness_named(self, epoch: int) -> None: ...

    def witness_claim(self, vote: WitnessVote, holder: str | None = None) -> None: ...

    def witness_look(self, epoch: int) -> tuple[WitnessVote, float | None] | None:
        return (replace(self.vote), None) if epoch == self.vote.epoch else None

    def witness_entered(self, epoch: int, sent_at: float) -> None: ...

    def witness_refreshed(self, epoch: int, sent_at: float, read: WitnessRead, leading: int | None) -> bool:
        return self.vote.refresh(sent_at, read, leading)

    def witness_unrelied(self, epoch: int, now: float) -> bool:
        return False


def test_a_claimants_gate_is_published_as_its_wait_of_d_ends(tmp_path):
    store = MemoryLeaseStore()
    claim = WitnessRecord(KMSN, "S002", 8, relies=True)
    assert store.write_witness(claim, store.read_witness(KMSN).revision).value == "written"
    vote = WitnessVote.claimed("S002", 8, T, sent_at=10.0, returned_at=10.05,
                               replaced=WitnessRecord(KMSN, "S001", 7, relies=True))  # fmt: skip
    clock, book = Clock(10.1), ClaimantBook(vote)
    published: list[tuple[float, float | None]] = []  # (when, until when the vote counts then)
    keeper = WitnessKeeper(store, KMSN, "S002", book, T, leading=lambda: 8,  # type: ignore[arg-type]
                           publish=lambda: published.append((clock.now, book.vote.until(clock.now))),
                           react=lambda r: None, renew_every=3.0, gate_clock=clock)  # fmt: skip
    for at in (10.1, 10.3, 10.55, 10.65):  # three refreshes within D: each publishes a shut gate
        clock.now = at
        keeper.step()
    assert [until for _, until in published] == [None, None, None]
    assert keeper.next_look() == pytest.approx(vote.counts_from - 10.65 + OPEN_LAG)  # < half an interval
    clock.now = vote.counts_from + OPEN_LAG
    keeper.step()  # no refresh is due (the last was sent 0.16 s ago): D's end alone publishes
    assert published[-1] == (clock.now, pytest.approx(10.55 + T.window))
    assert len(published) == 4
    assert keeper.next_look() == pytest.approx(T.interval / 2)  # counting: back to its half interval
    keeper.step()
    assert len(published) == 4  # once
