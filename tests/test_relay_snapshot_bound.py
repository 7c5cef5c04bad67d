"""relay.json's snapshot is bounded in bytes before it is written (`relay.runner.snapshot_bound`)."""

from __future__ import annotations

import json

from relay.runner.snapshot_bound import MAX_BYTES, MAX_LISTED, bounded
from relay.wire.events import MAX_NAME

LONGEST = "\U0001f600" * MAX_NAME  # 64 emoji: 12 bytes each as JSON escapes, the worst a name costs


def snapshot(clients: int, stations: int) -> dict:
    names = [f"{i:05d}{LONGEST[5:]}" for i in range(stations)]
    return {
        "node": "S001",
        "clients": [
            {"kmsn": LONGEST, "station": n, "role": "agent", "session": f"{i:016x}"}
            for i, n in enumerate(names[:clients])
        ],
        "counts": {LONGEST: {n: {"agent": 1} for n in names}},
        "stations": {
            "loaded": True,
            "bound": 0,
            "credential": names,
            "token": names,
            "refused": {n: {"count": 1, "peer": "x"} for n in names},
            "untracked": 0,
        },
        "drops": {"protocol_error": 3},
    }


def test_a_small_snapshot_is_written_as_it_is():
    doc = snapshot(3, 3)
    assert bounded(doc) == doc


def test_each_list_keeps_its_first_entries_and_says_how_many_it_left_out():
    doc = bounded(snapshot(MAX_LISTED + 7, MAX_LISTED + 9), max_bytes=1 << 30)
    assert len(doc["clients"]) == MAX_LISTED and doc["clients"][0]["station"].startswith("00000")
    assert len(doc["counts"][LONGEST]) == MAX_LISTED
    assert len(doc["stations"]["token"]) == len(doc["stations"]["refused"]) == MAX_LISTED
    assert doc["dropped"] == {"clients": 7, "counts": 9, "stations.credential": 9, "stations.token": 9,
                              "stations.refused": 9}  # fmt: skip
    assert doc["drops"] == {"protocol_error": 3} and doc["node"] == "S001"  # the rest untouched


def test_the_longest_names_in_every_list_never_take_the_snapshot_past_its_bytes():
    doc = bounded(snapshot(5000, 5000))
    assert len(json.dumps(doc)) <= MAX_BYTES
    assert doc["stations"]["credential"], "the worker still learns the stations' keys"
    assert doc["dropped"]["clients"] == 5000  # the sessions went first


def test_a_tight_budget_drops_the_lists_in_order_and_counts_them():
    doc = bounded(snapshot(10, 10), max_bytes=2000)
    assert len(json.dumps(doc)) <= 2000
    assert doc["clients"] == [] and doc["counts"] == {} and "token" not in doc["stations"]
    assert doc["dropped"]["clients"] == 10 and doc["dropped"]["stations.token"] == 10
