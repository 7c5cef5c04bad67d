"""The retention rule and the lines it keeps (elections/core/retention.py), pure."""

from __future__ import annotations

import random

import pytest

from elections.core.commands import PoolCommands
from elections.core.retention import MAX_TARGETS, Keeper, Segment, retired

DAY = 86400.0


def seg(first: int, size: int = 100, age_days: float | None = 0.0) -> Segment:
    return Segment(
        f"S001@{first:012d}.jsonl", first, size, None if age_days is None else 1000 * DAY - age_days * DAY
    )


@pytest.mark.parametrize(
    "segments, active, keep_bytes, keep_days, retired_firsts",
    [
        ([seg(1), seg(10), seg(20)], 50, 1000, 30, []),  # everything fits
        ([seg(1), seg(10), seg(20)], 50, 200, 30, [1, 10]),  # the newest that fit stay, older go
        ([seg(20), seg(1), seg(10)], 50, 200, 30, [1, 10]),  # in any order given
        ([seg(1), seg(10), seg(20)], 500, 400, 30, [1, 10, 20]),  # the active file alone is over
        ([seg(1, age_days=40), seg(10, age_days=35), seg(20, age_days=1)], 0, 10**9, 30, [1, 10]),
        ([seg(1, age_days=40), seg(10, age_days=1), seg(20, age_days=50)], 0, 10**9, 30, [1, 10, 20]),
        ([seg(1, age_days=None), seg(10)], 0, 10**9, 30, []),  # an unknown age keeps by size only
        ([], 10**9, 10, 30, []),  # the active file is never retired
    ],
    ids=[
        "all segments fit within the keep",
        "the oldest beyond the keep are retired",
        "segments are ordered by their first seq",
        "an oversized active file retires every sealed segment",
        "segments older than the keep days are retired",
        "a kept segment is never older than a retired one",
        "a segment of unknown age is judged by size",
        "with no sealed segment nothing is retired",
    ],
)
def test_retired(segments, active, keep_bytes, keep_days, retired_firsts):
    got = retired(segments, active, keep_bytes, keep_days * DAY, 1000 * DAY)
    assert [s.first for s in got] == retired_firsts


def _commands(rng: random.Random, n: int) -> list[dict]:
    out = []
    for seq in range(1, n + 1):
        kind = rng.choice(["drain_requested", "undrain_requested", "pause_requested", "resume_requested",
                           "promote_requested", "action_applied", "elected", "audit"])  # fmt: skip
        doc = {
            "node": "S001",
            "seq": seq,
            "kind": kind,
            "epoch": rng.randint(1, 50),
            "clock": rng.randint(0, 40),
        }
        if kind in ("drain_requested", "undrain_requested", "promote_requested"):
            doc["target"] = rng.choice(["S001", "S002", "S003"])
        out.append(doc)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_the_kept_lines_fold_to_the_same_pool_state_as_all_lines(seed):
    rng = random.Random(seed)
    events = _commands(rng, 300)
    keeper = Keeper()
    for doc in rng.sample(events, len(events)):  # any order
        keeper.add(doc, str(doc["seq"]).encode())
    kept = {int(raw) for _, raw in keeper.lines()}
    kept_events = [e for e in events if e["seq"] in kept]
    full, part = PoolCommands(), PoolCommands()
    full.apply(events)
    part.apply(kept_events)
    assert (part.drained, part.paused, part.clock) == (full.drained, full.paused, full.clock)
    assert max(e["epoch"] for e in kept_events) == max(e["epoch"] for e in events)
    elected = [e["seq"] for e in events if e["kind"] == "elected"]
    audits = [e["seq"] for e in events if e["kind"] == "audit"]
    assert (not elected or elected[-1] in kept) and (not audits or audits[-1] in kept)
    assert len(kept) <= 12


def test_drain_registers_are_bounded_to_the_newest_targets():
    keeper = Keeper()
    for i in range(MAX_TARGETS + 50):
        doc = {"node": "S001", "seq": i + 1, "kind": "drain_requested", "target": f"N{i}", "clock": i}
        keeper.add(doc, b"x")
    drains = [k for k in keeper.kept if k.startswith("drain:")]
    assert len(drains) == MAX_TARGETS and "drain:N0" not in drains and f"drain:N{MAX_TARGETS + 49}" in drains
