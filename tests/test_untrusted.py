"""Everything from outside goes through one guarded reader: bounded, verified,
and if bad, no evidence with a cause (docs/design.md §5.4). Unit level, with real
files for the event tail; fuzzed with hypothesis (`make fuzz` runs it longer)."""

from __future__ import annotations

import json
import os
import resource

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elections.core.lease import sign
from elections.core.untrusted import EVENT_LINE, LEASE, Limits, Untrusted, load_object, nesting_depth
from elections.ports.events.eventlog import PER_CALL, EventTail, JsonlEventSink
from stkhost.clock import FakeClock

KEY = "pool-key-0123456789abcdef"
FUZZ = settings(max_examples=int(os.environ.get("STK_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])  # fmt: skip


def line(node: str, seq: int, key: str = KEY, **extra) -> bytes:  # type: ignore[no-untyped-def]
    doc = {"node": node, "seq": seq, "kind": "drain_requested", "epoch": 3, "target": "S001", **extra}
    if key:
        doc["sig"] = sign(doc, key)
    return (json.dumps(doc) + "\n").encode()


@pytest.mark.parametrize(
    "raw, cause",
    [
        (b"[" * 100_000, "too_large"),
        (b"[" * 5_000, "too_deep"),
        (b'{"a":' * 1_000, "too_deep"),
        (b"\xff\xfe{}", "not_utf8"),
        (b'{"a": 1', "not_json"),
        (b"[1, 2]", "not_object"),
        (b'"' * 10_000, "not_json"),
        (b'{"a": "\\' + b"\\" * 9_000 + b'"}', "not_json"),
        (b'{"gap_s": NaN}', "not_json"),  # Python's parser takes NaN and Infinity; JSON has neither
        (b'{"epoch": -Infinity}', "not_json"),
    ],
)
def test_hostile_shapes_are_refused_with_a_cause_not_an_exception(raw, cause):
    with pytest.raises(Untrusted) as info:
        load_object(raw, LEASE, "lease")
    assert info.value.cause == cause


def test_brackets_inside_strings_do_not_count_as_nesting_and_escapes_cannot_hide_them():
    assert nesting_depth(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[["}', 16) == 1
    assert nesting_depth(b'{"a": "\\"[[[["}', 16) == 1
    assert nesting_depth(b'"a\\nb" ' + b"[" * 40, 16) == 17


@FUZZ
@given(st.binary(max_size=4096))
def test_any_bytes_give_an_object_or_untrusted_never_another_exception(raw):
    try:
        assert isinstance(load_object(raw, Limits(2048, 8)), dict)
    except Untrusted as exc:
        assert exc.cause


@FUZZ
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
        max_leaves=40,
    )
)
def test_nesting_is_measured_like_the_parser_sees_it(doc):
    raw = json.dumps({"x": doc}).encode()
    depth = nesting_depth(raw, 64)

    def real(v):  # type: ignore[no-untyped-def]
        if isinstance(v, dict):
            return 1 + max(map(real, v.values()), default=0)
        if isinstance(v, list):
            return 1 + max(map(real, v), default=0)
        return 0

    assert depth == real({"x": doc})


# -- the event tail -------------------------------------------------------------------------
def test_the_tail_hands_on_only_signed_lines_of_the_files_own_node_and_moves_past_the_rest(tmp_path):
    path = tmp_path / "S002.jsonl"
    path.write_bytes(
        line("S002", 1)
        + line("S002", 2, key="")  # unsigned
        + line("S002", 3, key="wrong-key-0123456789")  # forged
        + line("S001", 4)  # another node's line in S002's file
        + b"[" * 50_000
        + b"\n"  # poison
        + line("S002", 1)  # a replay of an accepted line
        + line("S002", 5)
    )
    tail = EventTail(tmp_path, key=KEY)
    assert [e["seq"] for e in tail.new_events()] == [1, 5]
    assert tail.new_events() == []  # the poison is behind it, never re-read
    assert tail.refusals.counts == {"unsigned": 1, "forged": 1, "wrong_node": 1, "too_deep": 1, "replayed": 1}
    sources = {r["source"] for r in tail.refusals.to_doc()["recent"]}
    assert sources == {"events/S002.jsonl"}


def test_a_30_mb_event_file_is_read_in_bounded_steps_with_bounded_memory(tmp_path):
    one = line("S003", 1, reason="x" * 200)
    with open(tmp_path / "S003.jsonl", "wb") as fh:
        for seq in range(1, 30 * (1 << 20) // len(one) + 2):
            fh.write(line("S003", seq, reason="x" * 200))
    size = (tmp_path / "S003.jsonl").stat().st_size
    tail = EventTail(tmp_path, key=KEY)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    calls, total = 0, 0
    while True:
        got = tail.new_events()
        calls += 1
        total += len(got)
        assert len(got) * len(one) <= PER_CALL + len(one)
        if not tail.backlog:
            break
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert total == tail.last_seq["S003"] and tail.offsets["S003.jsonl"] == size
    assert calls >= size // PER_CALL
    assert grown_kib < 64 << 10, f"memory grew {grown_kib} KiB reading a {size >> 20} MiB file"


def test_a_line_longer_than_any_event_is_skipped_and_the_tail_goes_on(tmp_path):
    path = tmp_path / "S002.jsonl"
    path.write_bytes(
        line("S002", 1) + b'{"x": "' + b"a" * (EVENT_LINE.max_bytes * 5) + b'"}\n' + line("S002", 2)
    )
    tail = EventTail(tmp_path, key=KEY)
    seqs = []
    for _ in range(20):
        seqs += [e["seq"] for e in tail.new_events()]
        if not tail.backlog:
            break
    assert seqs == [1, 2] and tail.refusals.counts["too_large"] >= 1


def test_links_fifos_and_too_many_files_in_events_are_refused(tmp_path):
    (tmp_path / "S001.jsonl").write_bytes(line("S001", 1))
    outside = tmp_path.parent / f"{tmp_path.name}-secret"
    outside.write_text("not an event")
    (tmp_path / "S009.jsonl").symlink_to(outside)
    os.mkfifo(tmp_path / "S008.jsonl")
    tail = EventTail(tmp_path, key=KEY)
    assert [e["node"] for e in tail.new_events()] == ["S001"]
    assert tail.refusals.counts["not_a_file"] == 2


def test_a_writer_signs_its_lines_and_never_appends_through_a_planted_link(tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-target"
    outside.write_text("")
    (tmp_path / "S001.jsonl").symlink_to(outside)
    sink = JsonlEventSink(tmp_path / "S001.jsonl", "S001", FakeClock(), key=KEY)
    with pytest.raises(Untrusted):
        sink.record("elected", 1, "x")
    assert outside.read_text() == ""
    (tmp_path / "S001.jsonl").unlink()
    sink.record("elected", 1, "x")
    assert [e["seq"] for e in EventTail(tmp_path, key=KEY).new_events()] == [1]
