"""The beacon board's replay memory survives a restart (issue 40, finding 5): the highest seq
per (node, boot) is kept in DATA_DIR (`ports.beacons.beacon_seqs`), written atomically and read back
through the guarded reader. A restarted member refuses a dead leader's captured beacons sent
again; a damaged file starts the board empty, counted and shown, never an exception."""

import json
import os
import socket
import time

import pytest
from harness import free_port, wait_until

from elections.core.beacon_board import KEEP_BOOTS, BeaconBoard, Standing
from elections.core.beacons import Beacon
from elections.ports.beacons.beacon_config import BeaconConfig
from elections.ports.beacons.beacon_seqs import SEQS_NAME, SeqFile
from elections.ports.beacons.beacons import BeaconService

KEY = "pool-key-0123456789abcdef"
KMSN = "9999-9999-99-99"
BOOT = "0123456789abcdef"
FOLLOWER = Standing("S002", seen_key=("S001", 7, 4), holder_ip="10.0.0.1", max_epoch=7)


def raw(seq: int, renew_seq: int = 4, boot: str = BOOT, node: str = "S001") -> bytes:
    return Beacon(KMSN, node, "10.0.0.1", 9530, "leader", 7, renew_seq, boot, seq).encode(KEY)


def test_a_restored_board_refuses_what_it_accepted_before_and_takes_what_is_newer():
    before = BeaconBoard(KMSN, KEY, "S002")
    for seq in range(1, 101):
        before.receive(raw(seq, renew_seq=seq), "10.0.0.1", 100.0 + seq / 10, FOLLOWER)
    kept = json.loads(json.dumps(before.seqs()))  # as the file holds it
    after = BeaconBoard(KMSN, KEY, "S002")
    assert after.restore(kept) == 1
    for seq in range(1, 101):  # every captured beacon, sent again
        assert after.receive(raw(seq, renew_seq=seq), "10.0.0.9", 500.0 + seq / 10, FOLLOWER) is None
    assert after.refusals.counts == {"replayed": 100} and after.accepted == 0 and not after.members
    after.receive(raw(101, renew_seq=101), "10.0.0.1", 501.0, FOLLOWER)
    assert after.accepted == 1, "the live leader's next beacon is news"


@pytest.mark.parametrize(
    "doc",
    [
        None, [], "x", {"S001": []}, {"S001": {BOOT: -1}}, {"S001": {BOOT: True}},
        {"S001": {BOOT: 2**63}}, {"S001": {BOOT: 1.5}}, {"": {BOOT: 1}}, {"S001": {"": 1}},
        {"x" * 65: {BOOT: 1}}, {"S001": {"b" * 65: 1}},
    ],
)  # fmt: skip
def test_a_kept_board_of_another_shape_is_skipped_entry_by_entry(doc):
    b = BeaconBoard(KMSN, KEY, "S002")
    assert b.restore(doc) == 0 and b.seqs() == {}
    b.receive(raw(1), "10.0.0.1", 100.0, FOLLOWER)
    assert b.accepted == 1


def test_restoring_never_lowers_a_seq_and_keeps_the_boards_bounds():
    b = BeaconBoard(KMSN, KEY, "S002")
    b.receive(raw(50), "10.0.0.1", 100.0, FOLLOWER)
    assert b.restore({"S001": {BOOT: 10}}) == 1 and b.seqs()["S001"][BOOT] == 50
    boots = {f"{i:016x}": i for i in range(3 * KEEP_BOOTS)}
    assert b.restore({"S009": boots}) == KEEP_BOOTS and len(b.seqs()["S009"]) == KEEP_BOOTS


@pytest.mark.parametrize(
    "what, content, cause",
    [
        ("not json", b"\x00{garbage", "not_json"),
        ("not utf-8", b"\xff\xfe{}", "not_utf8"),
        ("cut short", b'{"v":1,"seqs":{"S001":{"0123', "not_json"),
        ("no seqs", b'{"v":1}', "bad_field"),
        ("a lone surrogate", b'{"v":1,"seqs":{"\\ud800":{}}}', "unencodable"),
        ("too deep", b"[" * 100_000, "too_deep"),
        ("a directory", None, "not_a_file"),
        ("a link", "link", "not_a_file"),
    ],
)
def test_a_damaged_file_starts_empty_with_its_cause_and_never_raises(tmp_path, what, content, cause):
    path = tmp_path / SEQS_NAME
    if content is None:
        path.mkdir()
    elif content == "link":
        (tmp_path / "elsewhere.json").write_text('{"v":1,"seqs":{}}')
        os.symlink(tmp_path / "elsewhere.json", path)
    else:
        path.write_bytes(content)
    seqs, refused = SeqFile(path).load()
    assert seqs == {} and refused is not None and refused.cause == cause, (what, refused)
    assert SeqFile(tmp_path / "absent.json").load() == ({}, None), "a first start"


def test_a_restarted_service_keeps_refusing_the_captured_beacons_and_counts_a_damaged_file(tmp_path):
    """Real sockets: a follower service hears 30 leader beacons, stops, and starts again on the
    same DATA_DIR file; the 30, sent again from another address, are refused as replays. A
    damaged file: the board starts empty, the refusal counted in the snapshot, not an exception."""
    ip = "127.0.0.34"
    port = free_port(ip)
    path = tmp_path / SEQS_NAME

    def follower() -> BeaconService:
        cfg = BeaconConfig(KMSN, "S002", ip, 9530, KEY, 0.05, port, ["127.0.0.35"], seq_file=str(path))
        return BeaconService(cfg, lambda: FOLLOWER, lambda r: None, time.monotonic).start()

    captured = [raw(seq, renew_seq=seq) for seq in range(1, 31)]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.36", 0))
        first = follower()
        try:
            for data in captured:
                sock.sendto(data, (ip, port))
            wait_until(lambda: first.board.accepted == 30, 5, "the 30 beacons")
            wait_until(
                lambda: path.exists() and json.loads(path.read_bytes())["seqs"] == {"S001": {BOOT: 30}},
                5,
                "them kept",
            )  # written a moment after the board took them
        finally:
            first.stop()
        again = follower()
        try:
            for data in captured:
                sock.sendto(data, (ip, port))
            wait_until(lambda: again.snapshot()["refusals"]["counts"].get("replayed") == 30, 5, "30 replays")
            assert again.board.accepted == 0 and again.renewal_heard("S001", 7) is None
        finally:
            again.stop()
        path.write_bytes(b'{"v":1,"seqs":')  # cut short, as a crash of a careless writer would leave it
        damaged = follower()
        try:
            counts = damaged.snapshot()["refusals"]["counts"]
            assert counts == {"not_json": 1}, counts
            sock.sendto(captured[0], (ip, port))
            wait_until(lambda: damaged.board.accepted == 1, 5, "an empty board to take one")
        finally:
            damaged.stop()
