"""The fold of station events (`elections.core.stations`), pure: order without wall
clocks, idempotence, hostile names, the cap; and the retention rule keeps what the
fold needs (`elections.core.retention.Keeper`)."""

from __future__ import annotations

import json
import random

import pytest

from elections.core.retention import Keeper
from elections.core.stations import BOUND, MAX_STATIONS, SEEN, UNBIND, StationBook


def bind(station: str, clock: int, node: str = "S001", seq: int = 1) -> dict:
    return {"kind": BOUND, "station": station, "clock": clock, "node": node, "seq": seq}


def reset(station: str, clock: int, node: str = "S002", seq: int = 1) -> dict:
    return {"kind": UNBIND, "target": station, "clock": clock, "node": node, "seq": seq}


def fold(*events: dict) -> StationBook:
    book = StationBook()
    book.apply(list(events))
    return book


@pytest.mark.parametrize(
    "events, bound",
    [
        ([bind("S002", 1)], True),
        ([bind("S002", 1), reset("S002", 2)], False),  # a reset given after seeing the bind
        ([reset("S002", 2), bind("S002", 1)], False),  # read in the other order: the same
        ([bind("S002", 1), reset("S002", 2), bind("S002", 3)], True),  # it used its credential again
        ([reset("S002", 5)], False),  # resetting an unbound station changes nothing
        ([bind("S002", 4, node="S001"), reset("S002", 4, node="S003")], False),  # concurrent: node order
        ([bind("S002", 4, node="S003"), reset("S002", 4, node="S001")], True),
    ],
    ids=["bound", "reset_after", "reset_read_first", "bound_again", "reset_only", "tie_b", "tie_a"],
)
def test_a_stations_binding_is_the_last_bind_or_reset_in_command_order(events, bound):
    assert fold(*events).is_bound("S002") is bound
    shuffled = list(events)
    random.Random(7).shuffle(shuffled)
    assert fold(*shuffled).is_bound("S002") is bound


def test_folding_again_changes_nothing_and_says_so():
    book = fold(bind("S002", 1), {"kind": SEEN, "station": "C01", "node": "S001", "seq": 2})
    assert not book.apply([bind("S002", 1), {"kind": SEEN, "station": "C01", "node": "S001", "seq": 2}])
    doc = {"bound": ["S002"], "known": {"C01": "token", "S002": "station"}, "at": {"S002": 1}, "clock": 1}
    assert book.to_doc() == doc


@pytest.mark.parametrize("name", ["", "x" * 65, "S\n002", "S\x00", 7, None, ["S002"], {"a": 1}])
def test_names_that_are_no_station_are_not_folded(name):
    book = fold({"kind": BOUND, "station": name, "clock": 1, "node": "S001", "seq": 1},
                {"kind": UNBIND, "target": name, "clock": 2, "node": "S001", "seq": 2})  # fmt: skip
    assert book.to_doc()["bound"] == [] and book.known() == []


def test_a_seen_station_is_not_bound_and_other_kinds_are_ignored():
    drain = {"kind": "drain_requested", "target": "S002", "clock": 9, "node": "S001", "seq": 2}
    book = fold({"kind": SEEN, "station": "C01", "node": "S001", "seq": 1}, drain)
    assert not book.is_bound("C01") and book.known() == ["C01"] and book.clock == 0


def test_past_the_cap_new_names_are_counted_not_folded_and_seen_names_never_crowd_out_a_binding():
    seen = [
        {"kind": SEEN, "station": f"X{i}", "node": "S001", "seq": i + 2} for i in range(MAX_STATIONS + 10)
    ]
    book = fold(bind("S0000", 1), *seen, bind("S0001", 2, seq=9999))
    assert len(book.keys) == MAX_STATIONS and book.overflow == 10
    assert book.is_bound("S0000") and book.is_bound("S0001")  # a token flood of names binds on
    book.apply([bind(f"B{i}", 3, seq=10_000 + i) for i in range(MAX_STATIONS)])
    assert len(book.bound) == MAX_STATIONS and book.overflow == 12
    book.apply([reset("S0000", 4)])
    assert not book.is_bound("S0000")


def test_the_kept_lines_of_a_retired_segment_hold_every_stations_last_bind_or_reset():
    lines = [bind("S002", 1, seq=1), reset("S002", 2, node="S001", seq=2), bind("S002", 3, seq=3),
             bind("S003", 4, seq=4), {"kind": SEEN, "station": "C01", "node": "S001", "seq": 5},
             {"kind": SEEN, "station": "C01", "node": "S001", "seq": 6},
             reset("S003", 7, node="S001", seq=7)]  # fmt: skip
    keeper = Keeper()
    for doc in lines:
        keeper.add(doc, json.dumps(doc).encode())
    kept = [json.loads(raw) for _, raw in keeper.lines()]
    assert fold(*kept).to_doc() == fold(*lines).to_doc()
    assert sorted(d["seq"] for d in kept) == [3, 5, 7]  # the first sighting of C01 is the one kept
