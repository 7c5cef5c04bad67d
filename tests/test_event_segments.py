"""Segmented event files and their compaction, with real files (issue 12, point 3).

A writer seals its active file into segments and retires old ones under the
retention rule; what a rule still needs survives (the last election, the
highest epoch, the last command of every register, the audit chain head); a
reader that joins late or that followed along sees every node's events in
order, once, without refusals; the old single-file format is read; forged,
replayed, linked and huge segments are refused without stopping the rest.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from elections.core.commands import PoolCommands
from elections.core.lease import sign
from elections.ports.events.eventlog import EventTail, JsonlEventSink
from elections.ports.events.segments import MAX_SEGMENT, Retention, base_header, parse_name, sealed_name
from elections.ports.share.share import LocalShare
from stkhost.clock import FakeClock

KEY = "pool-key-0123456789abcdef"
SMALL = Retention(segment_bytes=4 << 10, keep_bytes=16 << 10, keep_s=30 * 86400.0)


def sink(folder: Path, node: str, clock: FakeClock, rule: Retention | None = SMALL) -> JsonlEventSink:
    return JsonlEventSink(folder / f"{node}.jsonl", node, clock, key=KEY, retention=rule)


def drain_all(tail: EventTail, calls: int = 500) -> list[dict]:
    out: list[dict] = []
    for _ in range(calls):
        out += tail.new_events()
        if not tail.backlog:
            break
    return out


def history(w: JsonlEventSink, n: int, clock: FakeClock, start_epoch: int = 1) -> None:
    """`n` ordinary events of a busy member (each well over 100 bytes)."""
    for i in range(n):
        w.record("action_applied", start_epoch, f"start_relay done, step {i} " + "x" * 80)
        clock.advance(1)


def node_bytes(folder: Path, node: str) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.name.split("@")[0].split(".jsonl")[0] == node)


def test_old_segments_are_retired_and_what_rules_need_survives(tmp_path):
    clock = FakeClock()
    w = sink(tmp_path, "S001", clock)
    w.record("elected", 41, "first", cause="first")
    w.record("drain_requested", 41, "op", target="S002", clock=3)
    w.record("drain_requested", 41, "op", target="S003", clock=4)
    w.record("undrain_requested", 41, "op", target="S003", clock=5)
    w.record("pause_requested", 41, "op", clock=6)
    w.record("audit", 41, "op", audit={"seq": 7, "hash": "h7"})
    w.record("audit", 41, "op", audit={"seq": 8, "hash": "h8"})
    other = sink(tmp_path, "S009", clock, None)  # another member's files: never touched by S001
    for _ in range(60):
        other.record("action_applied", 1, "x" * 100)
    (tmp_path / "S009.jsonl").rename(tmp_path / sealed_name("S009", 1))
    theirs = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("S009")}
    everything: list[dict] = []
    follower = EventTail(tmp_path, key=KEY)
    everything += drain_all(follower)
    for _ in range(40):
        history(w, 10, clock)
        w.compactor.join()
        everything += drain_all(follower)  # a reader that follows along, across rolls and compactions
    w.compactor.run()
    everything += drain_all(follower)

    assert w.compactor.retired_total > 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("S009")} == theirs
    # At most the rule: the newest segments within keep_bytes (active included), one more
    # segment being filled, and a base of a few lines.
    assert node_bytes(tmp_path, "S001") <= SMALL.keep_bytes + SMALL.segment_bytes + 4096
    mine = [e["seq"] for e in everything if e["node"] == "S001"]
    assert mine == list(range(1, 408))  # followed: every event once, in order
    assert follower.refusals.total() == 0

    joiner = EventTail(tmp_path, key=KEY)
    seen = [e for e in drain_all(joiner) if e["node"] == "S001"]
    seqs = [e["seq"] for e in seen]
    assert seqs == sorted(set(seqs)) and joiner.refusals.total() == 0
    assert len(seen) < 200  # it did not read the whole history
    kinds = {e["seq"]: e["kind"] for e in seen}
    assert kinds[1] == "elected"  # the last election and the highest epoch
    assert kinds[2] == "drain_requested" and kinds[4] == "undrain_requested" and 3 not in kinds
    assert kinds[5] == "pause_requested" and kinds[7] == "audit" and 6 not in kinds  # the audit head
    joined, full = PoolCommands(), PoolCommands()
    joined.apply(seen)
    full.apply([e for e in everything if e["node"] == "S001"])
    assert (joined.drained, joined.paused, joined.clock) == (full.drained, full.paused, full.clock)
    assert max(e["epoch"] for e in seen) == 41


def test_a_signed_line_with_an_out_of_range_seq_cannot_move_the_base_out_of_every_readers_reach(tmp_path):
    clock = FakeClock()
    w = sink(tmp_path, "S001", clock)
    w.record("elected", 41, "first", cause="first")
    planted = {
        "node": "S001",
        "seq": 10**20,
        "kind": "renewed",
        "epoch": 41,
        "at": "2026-06-15T20:30:15",
        "reason": "",
    }
    with open(tmp_path / "S001.jsonl", "a") as fh:  # a key holder's line in the writer's own file
        fh.write(json.dumps({**planted, "sig": sign(planted, KEY)}) + "\n")
    for _ in range(20):
        history(w, 10, clock)
        w.compactor.join()
    w.compactor.run()
    assert w.compactor.retired_total > 0
    bases = [p.name for p in tmp_path.iterdir() if ".base" in p.name]
    assert bases and all(parse_name(name) is not None for name in bases), bases
    joiner = EventTail(tmp_path, key=KEY)
    seen = {e["seq"]: e["kind"] for e in drain_all(joiner)}
    assert seen[1] == "elected"  # kept in a base that readers can find
    assert 10**20 not in seen


def test_a_writer_that_restarts_goes_on_after_its_last_seq_even_with_only_a_base_left(tmp_path):
    clock = FakeClock()
    w = sink(tmp_path, "S001", clock)
    w.record("elected", 7, "won")
    history(w, 200, clock, start_epoch=7)
    w.compactor.join()
    w.compactor.run()
    bases = [p for p in tmp_path.iterdir() if p.name.endswith(".base.jsonl")]
    assert len(bases) == 1
    upto = int(bases[0].name.split("@")[1].split(".")[0])
    for p in tmp_path.iterdir():
        if p not in bases:
            p.unlink()  # the active file and the segments lost: only the base remains
    again = sink(tmp_path, "S001", clock)
    again.record("stepped_down", 7, "restart")
    tail = EventTail(tmp_path, key=KEY)
    got = drain_all(tail)
    assert got[0]["kind"] == "elected" and got[-1]["kind"] == "stepped_down"
    assert got[-1]["seq"] == upto + 1 and tail.refusals.total() == 0


def test_old_segments_age_out_on_the_writers_own_clock(tmp_path):
    clock = FakeClock()
    rule = Retention(segment_bytes=4 << 10, keep_bytes=1 << 30, keep_s=86400.0)
    w = sink(tmp_path, "S001", clock, rule)
    w.record("elected", 3, "won")
    history(w, 100, clock, start_epoch=3)
    w.compactor.join()
    before = node_bytes(tmp_path, "S001")
    clock.advance(2 * 86400)
    history(w, 40, clock, start_epoch=3)  # rolls at least once more
    w.compactor.join()
    w.compactor.run()
    assert node_bytes(tmp_path, "S001") < before
    seen = drain_all(EventTail(tmp_path, key=KEY))
    assert seen[0]["kind"] == "elected"  # kept, though its segment aged out


def test_the_old_single_file_format_is_read_and_taken_over(tmp_path):
    clock = FakeClock()
    old = sink(tmp_path, "S002", clock, rule=None)  # one file growing without end, as before
    old.record("elected", 5, "won")
    history(old, 300, clock, start_epoch=5)
    assert os.listdir(tmp_path) == ["S002.jsonl"]
    tail = EventTail(tmp_path, key=KEY)
    assert [e["seq"] for e in drain_all(tail)] == list(range(1, 302))
    new = sink(tmp_path, "S002", clock)  # the upgraded agent writes on, seals and retires
    got = []
    for _ in range(10):
        history(new, 10, clock, start_epoch=5)
        new.compactor.join()
        got += drain_all(tail)
    new.compactor.run()
    assert [e["seq"] for e in got] == list(range(302, 402))
    assert tail.refusals.total() == 0
    assert node_bytes(tmp_path, "S002") <= SMALL.keep_bytes + SMALL.segment_bytes + 4096
    assert drain_all(EventTail(tmp_path, key=KEY))[0]["kind"] == "elected"


def test_a_missing_older_segment_is_retired_not_an_attack(tmp_path):
    clock = FakeClock()
    w = sink(tmp_path, "S001", clock, Retention(segment_bytes=4 << 10, keep_bytes=1 << 30))
    history(w, 200, clock)
    sealed = sorted(p for p in tmp_path.iterdir() if "@" in p.name)
    assert len(sealed) >= 3
    sealed[0].unlink()  # anyone on the share may delete files
    tail = EventTail(tmp_path, key=KEY)
    got = [e["seq"] for e in drain_all(tail)]
    assert got and got[-1] == 200 and got == sorted(got)
    assert tail.refusals.total() == 0


def test_forged_replayed_linked_and_huge_segments_are_refused_and_the_real_ones_read(tmp_path):
    clock = FakeClock()
    w = sink(tmp_path, "S001", clock, Retention(segment_bytes=4 << 10, keep_bytes=1 << 30))
    history(w, 120, clock)
    follower = EventTail(tmp_path, key=KEY)
    assert len(drain_all(follower)) == 120
    sealed = sorted(p for p in tmp_path.iterdir() if "@" in p.name)
    # A base that would cover every real segment, with a header signed by another key.
    forged = {"node": "S001", "base": 999_999_999_999}
    forged["sig"] = sign(forged, "not-the-pool-key-0123456789")
    (tmp_path / "S001@999999999999.base.jsonl").write_text(json.dumps(forged) + "\n")
    # A valid base header under another node's name (a header is bound to its file).
    (tmp_path / "S002@000000000100.base.jsonl").write_text(json.dumps(base_header("S001", 100, KEY)) + "\n")
    # A real sealed segment copied under a later name: its lines are replays.
    (tmp_path / sealed_name("S001", 500)).write_bytes(sealed[0].read_bytes())
    # A link and a FIFO named like segments; a huge sparse segment of another node.
    (tmp_path / sealed_name("S003", 1)).symlink_to(sealed[1])
    os.mkfifo(tmp_path / sealed_name("S003", 2))
    with open(tmp_path / sealed_name("S004", 1), "wb") as fh:
        fh.truncate(4 * MAX_SEGMENT)
    history(w, 5, clock)
    got = drain_all(follower)
    assert [e["seq"] for e in got] == [121, 122, 123, 124, 125]
    counts = follower.refusals.counts
    assert counts.get("forged", 0) >= 2 and counts.get("replayed", 0) >= 1
    assert counts.get("not_a_file", 0) >= 2 and counts.get("too_large", 0) >= 1
    joiner = EventTail(tmp_path, key=KEY)
    seqs = [e["seq"] for e in drain_all(joiner, calls=200) if e["node"] == "S001"]
    assert seqs == list(range(1, 126))  # the forged cover hid nothing; the copy added nothing


def test_a_reader_goes_on_in_a_segment_sealed_while_it_was_reading_it(tmp_path):
    clock = FakeClock()
    w = sink(tmp_path, "S001", clock, Retention(segment_bytes=64 << 10, keep_bytes=1 << 30))
    history(w, 50, clock)
    tail = EventTail(tmp_path, key=KEY)
    assert len(tail.new_events()) == 50
    history(w, 30, clock)  # unread lines at the end of the active file...
    (tmp_path / "S001.jsonl").rename(tmp_path / sealed_name("S001", 1))  # ...sealed by its writer
    w2 = sink(tmp_path, "S001", clock, Retention(segment_bytes=1 << 30, keep_bytes=1 << 30))
    history(w2, 600, clock)  # and the new active file grew past the old offset before the next read
    got = [e["seq"] for e in drain_all(tail)]
    assert got == list(range(51, 681)) and tail.refusals.total() == 0


def test_a_link_or_file_planted_at_the_next_sealed_name_is_moved_aside_and_the_writer_seals_on(tmp_path):
    clock = FakeClock()
    w = sink(tmp_path, "S001", clock, Retention(segment_bytes=4 << 10, keep_bytes=1 << 30))
    w.record("elected", 1, "won")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_text("not ours")
    (tmp_path / sealed_name("S001", 1)).symlink_to(outside)  # where the active file will be sealed
    history(w, 60, clock)
    assert outside.read_text() == "not ours"
    first = tmp_path / sealed_name("S001", 1)
    assert first.is_file() and not first.is_symlink()
    tail = EventTail(tmp_path, key=KEY)
    assert [e["seq"] for e in drain_all(tail)] == list(range(1, 62)) and tail.refusals.total() == 0


def test_over_smb_the_writer_seals_and_retires_and_a_tail_reads_every_node_in_order(samba_server):
    from samba import PASSWORD

    from elections.ports.share.smbshare import SmbShare
    from stkconfig.smburl import parse_smb_url

    samba_server.path("segments").mkdir(exist_ok=True)
    (samba_server.path("segments") / "events").mkdir(exist_ok=True)
    share = SmbShare(parse_smb_url(samba_server.url("segments")), PASSWORD, 5.0)
    clock = FakeClock()
    w = JsonlEventSink("events/S001.jsonl", "S001", clock, key=KEY, share=share, retention=SMALL)
    w.record("elected", 9, "won")
    follower = EventTail("events", key=KEY, share=share)
    got: list[dict] = []
    for _ in range(10):
        history(w, 20, clock, start_epoch=9)
        w.compactor.join()
        got += drain_all(follower)
    w.compactor.run()
    local = samba_server.path("segments") / "events"  # the same files, as the server holds them
    names = sorted(p.name for p in local.iterdir())
    assert any(n.endswith(".base.jsonl") for n in names) and any("@" in n for n in names)
    assert node_bytes(local, "S001") <= SMALL.keep_bytes + SMALL.segment_bytes + 4096
    assert [e["seq"] for e in got] == list(range(1, 202)) and follower.refusals.total() == 0
    joiner = drain_all(EventTail("events", key=KEY, share=share))
    assert joiner[0]["kind"] == "elected" and joiner[-1]["seq"] == 201


# -- a writer that lost its active file ------------------------------------------------------------
def _lose_active_file_and_restart(folder: Path, clock: FakeClock, mark: Path | None) -> tuple[list, dict]:
    """S001 writes (sealing segments), a reader follows, someone deletes S001's active
    file, S001 restarts and writes 3 more events: (what the reader took after, refusals)."""
    w = JsonlEventSink(folder / "S001.jsonl", "S001", clock, key=KEY, retention=SMALL, mark=mark)
    reader = EventTail(folder, key=KEY, clock=clock)
    history(w, 60, clock)  # several sealed segments, then an active file with the newest seqs
    seen = drain_all(reader)
    assert seen[-1]["seq"] == 60
    active = folder / "S001.jsonl"
    assert json.loads(active.read_text().splitlines()[0])["seq"] > 1  # the newest seqs are only here
    active.unlink()  # anyone who can write the share can delete
    restarted = JsonlEventSink(folder / "S001.jsonl", "S001", clock, key=KEY, retention=SMALL, mark=mark)
    for i in range(3):
        restarted.record("elected", 2, f"after the loss {i}")
    after: list = []
    for _ in range(3):  # a replaced active file is listed again before it is read again
        after += drain_all(reader)
    return after, dict(reader.refusals.counts)


def test_a_writer_that_lost_its_active_file_never_reuses_a_seq_and_readers_take_its_new_events(tmp_path):
    folder, clock = tmp_path / "events", FakeClock()
    folder.mkdir()
    (tmp_path / "local").mkdir()
    after, refused = _lose_active_file_and_restart(folder, clock, mark=tmp_path / "local" / "S001.seq")
    assert [(e["seq"], e["reason"]) for e in after] == [(61 + i, f"after the loss {i}") for i in range(3)]
    assert refused == {}


def test_without_its_local_mark_the_restarted_writer_reuses_seqs_that_readers_drop_unseen(tmp_path):
    # What the mark prevents: the seqs of the lost file are taken again (53..55 here), and
    # a reader that saw up to 60 takes the new file for the old one replaced and skips them
    # as lines it has read: the events are missing from every other history, uncounted.
    folder, clock = tmp_path / "events", FakeClock()
    folder.mkdir()
    after, refused = _lose_active_file_and_restart(folder, clock, mark=None)
    reused = [json.loads(line)["seq"] for line in (folder / "S001.jsonl").read_text().splitlines()]
    assert max(reused) <= 60 and after == [] and refused == {}


def test_a_reader_racing_the_writers_seals_and_retirements_sees_each_event_once_in_order(tmp_path):
    import threading

    clock = FakeClock()
    w = sink(tmp_path, "S001", clock)  # 4 KiB segments, 16 KiB kept: sealing and retiring all along
    tail = EventTail(tmp_path, key=KEY)
    seen: list[int] = []
    failures: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set() or tail.backlog:
                seen.extend(e["seq"] for e in tail.new_events())
        except BaseException as exc:  # any exception is the failure under test
            failures.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    history(w, 1500, clock)
    w.compactor.join()
    done.set()
    reader.join(30)
    assert not failures and not reader.is_alive()
    seen.extend(e["seq"] for e in drain_all(tail))
    assert seen == sorted(set(seen)) and seen[-1] == 1500  # none twice, none out of order
    assert tail.refusals.total() == 0, tail.refusals.counts  # the writer's own work is no attack


def test_a_segment_renamed_to_a_far_later_first_seq_hides_nothing_and_covers_nothing(tmp_path):
    clock = FakeClock()
    w = sink(tmp_path, "S001", clock)  # 16 KiB kept: the writer retires its old segments all along
    follower = EventTail(tmp_path, key=KEY)
    got: list[int] = []

    def follow(n: int) -> None:  # a reader that follows along, as every agent's does
        for _ in range(n // 10):
            history(w, 10, clock)
            w.compactor.join()
            got.extend(e["seq"] for e in drain_all(follower))

    follow(200)
    sealed = sorted(p for p in tmp_path.iterdir() if "@" in p.name and ".base" not in p.name)
    sealed[0].rename(tmp_path / sealed_name("S001", 999_999_999_999))  # anyone may rename files
    follow(300)  # the writer seals and retires on, the renamed file among its own
    assert got == list(range(1, 501))  # the renamed copy's lines were replays: none twice
    assert follower.refusals.counts.get("replayed", 0) >= 1
    bases = [p.name for p in tmp_path.iterdir() if ".base" in p.name]
    assert bases and all(int(name.split("@")[1][:12]) <= 500 for name in bases), bases  # no cover past 500
    joiner = EventTail(tmp_path, key=KEY)
    seqs = [e["seq"] for e in drain_all(joiner, calls=300)]
    assert seqs == sorted(set(seqs)) and set(range(490, 501)) <= set(seqs)


class RetiredAfterListing(LocalShare):
    """A share whose first listing still names a segment the writer's compaction (a thread of
    its own) retired before the reader opened it: a directory listing is no snapshot."""

    def __init__(self, root: Path, gone: str) -> None:
        super().__init__(root)
        self.gone, self.listed = gone, 0

    def listing(self, folder, suffix, limit, names=None):  # type: ignore[no-untyped-def]
        sizes, refused = (
            super().listing(folder, suffix, limit)
            if names is None
            else super().listing(folder, suffix, limit, names)
        )
        self.listed += 1
        if self.listed == 1:
            sizes = {self.gone: 4096, **sizes}
        return sizes, refused


def test_a_segment_retired_between_the_listing_and_its_read_makes_the_tail_list_again_at_once(tmp_path):
    folder, clock = tmp_path / "events", FakeClock()
    folder.mkdir()
    w = sink(folder, "S001", clock, rule=None)
    history(w, 5, clock)
    share = RetiredAfterListing(folder, sealed_name("S001", 1))  # read first: the lowest seq
    tail = EventTail("", key=KEY, clock=clock, share=share)
    first = tail.new_events()
    assert first == [] and tail.backlog  # nothing lost: call again, now
    assert [e["seq"] for e in drain_all(tail)] == [1, 2, 3, 4, 5]
    assert share.listed == 2
