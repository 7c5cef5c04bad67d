"""One suite of the `LeaseStore` contract (elections/ports/store/store.py) and of the
event log (elections/ports/events/event_streams.py, the record layer of
elections/ports/events/event_records.py above it), run against every backend: a
local directory, a real SMB share (Samba on loopback, spoken to with
smbprotocol, no mount), etcd (a real 3-member cluster on loopback,
`LEASE_STORE = etcd`) and the in-memory dict the in-process tests use.

A backend is a fixture that yields a `Pool`: it makes stores on one pool
(each as another machine would: its own connection), and it can put raw
bytes where a record lives, as anyone who can write the share can. The
records are named as on the share ("lease", "members/S001.json", "members");
etcd maps them to its keys. The acquisition lock is the share's alone (etcd
compares revisions in one transaction instead): the lock's tests run on the
backends that have one (`LOCKING`); every other test runs on all.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import signed_lock

from elections.core.lease import LeaseRecord, sign
from elections.core.witness import WitnessRecord
from elections.ports.events.event_records import PoolEventSink, PoolEventTail
from elections.ports.events.event_streams import EventStreams
from elections.ports.share.share_backend import ShareBackend
from elections.ports.store.store import FileLeaseStore, LeaseStore, WriteOutcome
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789-conformance"
STALE_S = 2.0


@dataclass
class Pool:
    name: str
    store: Callable[..., LeaseStore]  # store(node, clock, token=TOKEN, timeout=5.0): a new client
    put: Callable[[str, bytes], None]  # put(record, raw): "lease", "lock", "members/S001.json", ...
    remove: Callable[[str], None]  # remove(record), missing is fine
    streams: Callable[..., EventStreams]  # streams(node, clock, timeout=5.0): the backend's event log

    event_docs: Callable[[str], list[dict]]  # event_docs(node): the lines the node wrote, as stored
    plant_events: Callable[[str, list[dict]], None]  # plant_events(node, docs): lines put after its own
    event_bytes: Callable[[str], list[tuple[str, bytes]]]  # event_bytes(node): (where, bytes) as kept


RECORD_FILES = {"lease": "relay_leader.json", "lock": "relay_leader.lock", "witness": "relay_witness.json"}


def _folder_pool(name: str, folder: Path, where: Callable[[float], object]) -> Pool:
    """A pool kept in files of `folder` (seen directly), reached through `where(timeout)`."""

    def path(record: str) -> Path:
        return folder / RECORD_FILES.get(record, record)

    def put(record: str, raw: bytes) -> None:
        path(record).parent.mkdir(exist_ok=True)
        path(record).write_bytes(raw)

    def remove(record: str) -> None:
        target = path(record)
        if target.is_dir():
            for child in target.iterdir():
                child.unlink()
            target.rmdir()
        else:
            target.unlink(missing_ok=True)

    def store(node: str, clock, token: str = TOKEN, timeout: float = 5.0) -> LeaseStore:  # type: ignore[no-untyped-def]
        return FileLeaseStore(where(timeout), token, node, clock, lock_stale_s=STALE_S, timeout=timeout)

    def streams(node: str, clock, timeout: float = 5.0) -> EventStreams:  # type: ignore[no-untyped-def]
        return ShareBackend(where(timeout), TOKEN, node, clock, STALE_S, timeout).event_streams()

    def event_docs(node: str) -> list[dict]:
        raw = path(f"events/{node}.jsonl").read_bytes()
        return [json.loads(line) for line in raw.decode().splitlines() if line]

    def plant_events(node: str, docs: list[dict]) -> None:
        lines = [*event_docs(node), *docs]
        put(f"events/{node}.jsonl", "".join(json.dumps(d) + "\n" for d in lines).encode())

    def event_bytes(node: str) -> list[tuple[str, bytes]]:
        return [(f"events/{node}.jsonl", path(f"events/{node}.jsonl").read_bytes())]

    return Pool(name, store, put, remove, streams, event_docs, plant_events, event_bytes)


@pytest.fixture
def local_pool(tmp_path):
    folder = tmp_path / "socket"
    folder.mkdir()
    return _folder_pool("local", folder, lambda timeout: folder)


@pytest.fixture
def smb_pool(samba_server, request):
    from samba import PASSWORD

    from elections.ports.share.smbshare import SmbShare
    from stkconfig.smburl import parse_smb_url

    name = f"conf-{request.node.name[-40:]}".replace("[", "-").replace("]", "")
    folder = samba_server.path(name)
    folder.mkdir()
    url = parse_smb_url(samba_server.url(name))
    shares: list[SmbShare] = []

    def where(timeout: float) -> SmbShare:
        shares.append(SmbShare(url, PASSWORD, timeout))  # its own connection: another machine
        return shares[-1]

    yield _folder_pool("smb", folder, where)
    for share in shares:
        share.abort()


@pytest.fixture
def etcd_pool(etcd_cluster):
    from etcd import unique_prefix

    from elections.ports.etcd.backend import EtcdBackend
    from elections.ports.etcd.client import b64, prefix_end
    from elections.ports.etcd.events import event_key
    from elections.ports.etcd.pool import EtcdPool
    from elections.ports.etcd.store import EtcdLeaseStore

    prefix = unique_prefix()
    endpoints = [m.url for m in etcd_cluster.members]
    pools: dict[float, EtcdPool] = {}

    def place(timeout: float = 5.0) -> EtcdPool:
        # One client per deadline, shared by this test's stores: what one writes, the others
        # read at once (a process's stores of one pool share its watch, as an agent's do).
        if timeout not in pools:
            pools[timeout] = EtcdPool(endpoints, prefix, timeout, fallback=2.0)
        return pools[timeout]

    def key(record: str) -> str:
        if record == "lease":
            return "pool/leader"
        if record == "witness":
            return "pool/witness"
        if record == "members":
            return "pool/members/"
        if record.startswith("members/"):
            return "pool/members/" + record[len("members/") :].removesuffix(".json")
        raise KeyError(record)

    def changed() -> None:
        for p in pools.values():
            for part in ("lease", "members", "events"):
                p.touched(part)

    def put(record: str, raw: bytes) -> None:
        raw = raw[: 1 << 20]  # etcd refuses a request over ~1.5 MiB: the most anyone can plant
        place().client.call("kv/put", {"key": b64(prefix + key(record)), "value": b64(raw)})
        changed()

    def remove(record: str) -> None:
        body = {"key": b64(prefix + key(record))}
        if record.endswith("s"):  # "members": the whole folder
            body["range_end"] = b64(prefix_end(prefix + key(record)))
        place().client.call("kv/deleterange", body)
        changed()

    def store(node: str, clock, token: str = TOKEN, timeout: float = 5.0):  # type: ignore[no-untyped-def]
        return EtcdLeaseStore(place(timeout), token, node, clock)

    def streams(node: str, clock, timeout: float = 5.0) -> EventStreams:  # type: ignore[no-untyped-def]
        return EtcdBackend(place(timeout), node).event_streams()

    def event_docs(node: str) -> list[dict]:
        kvs, _ = place().bounded_range(f"events/{node}/", 1000, 1 << 16, 1 << 24)
        return [json.loads(kv.value) for kv in kvs]

    def plant_events(node: str, docs: list[dict]) -> None:
        client = place().client
        for doc in docs:  # an existing key is written again: a new line where an old one was
            k = b64(prefix + event_key(node, int(doc["seq"])))
            client.call("kv/deleterange", {"key": k})
            client.call("kv/put", {"key": k, "value": b64(json.dumps(doc))})
        changed()

    def event_bytes(node: str) -> list[tuple[str, bytes]]:
        kvs, _ = place().bounded_range(f"events/{node}/", 1000, 1 << 16, 1 << 24)
        return [(kv.key, kv.value or b"") for kv in kvs]

    return Pool("etcd", store, put, remove, streams, event_docs, plant_events, event_bytes)


@pytest.fixture
def memory_pool():
    """The dict backend the in-process tests use (`tests/memstore.py`): each store is
    another client of one dict, and so is each event log."""
    from elections.ports.store.backend import LEASE_KEY, MEMBERS, WITNESS_KEY
    from elections.ports.store.memory_backend import MemoryBackend
    from elections.ports.store.records import PoolStore

    records = MemoryBackend("memory")

    def key(record: str) -> str:
        if record == "lease":
            return LEASE_KEY
        if record == "witness":
            return WITNESS_KEY
        return MEMBERS + record[len("members/") :].removesuffix(".json") if record != "members" else MEMBERS

    def put(record: str, raw: bytes) -> None:
        records.put(key(record), raw)

    def remove(record: str) -> None:
        for k in [
            k for k in records.data if k == key(record) or (record == "members" and k.startswith(MEMBERS))
        ]:
            records.put(k, None)

    def store(node: str, clock, token: str = TOKEN, timeout: float = 5.0):  # type: ignore[no-untyped-def]
        return PoolStore(records.client(), token, node, clock)

    def streams(node: str, clock, timeout: float = 5.0) -> EventStreams:  # type: ignore[no-untyped-def]
        return records.client().event_streams()

    def event_docs(node: str) -> list[dict]:
        return [json.loads(raw) for raw in records.event_lines.get(node, [])]

    def plant_events(node: str, docs: list[dict]) -> None:
        records.event_lines.setdefault(node, []).extend(json.dumps(d).encode() for d in docs)

    def event_bytes(node: str) -> list[tuple[str, bytes]]:
        return [(f"events/{node}", raw) for raw in records.event_lines.get(node, [])]

    return Pool("memory", store, put, remove, streams, event_docs, plant_events, event_bytes)


POOLS = {"local": "local_pool", "smb": "smb_pool", "etcd": "etcd_pool", "memory": "memory_pool"}  # -> fixture
LOCKING = ("local", "smb")  # backends whose writers exclude each other with the share's lock file


@pytest.fixture(params=sorted(POOLS))
def pool(request) -> Pool:
    return request.getfixturevalue(POOLS[request.param])


@pytest.fixture(params=LOCKING)
def locking_pool(request) -> Pool:
    return request.getfixturevalue(POOLS[request.param])


def rec(node: str = "S001", epoch: int = 1, seq: int = 0) -> LeaseRecord:
    return LeaseRecord(kmsn="K", station=node, ip="127.0.0.1", port=9530, pid=4242, epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=10)  # fmt: skip


def member(node: str, seq: int = 1) -> dict:
    return {"node": node, "seq": seq, "ip": "127.0.0.1"}


def events(pool: Pool, node: str, clock, timeout: float = 5.0) -> tuple[PoolEventSink, PoolEventTail]:  # type: ignore[no-untyped-def]
    """A writer of `node`'s events and a reader of the pool's (each its own client), as
    `stores.open_event_sink`/`open_event_tail` open them: the one record layer over the backend."""
    sink = PoolEventSink(pool.streams(node, clock, timeout), node, clock, TOKEN)
    return sink, PoolEventTail(pool.streams("", clock, timeout), TOKEN, clock=clock)


# -- compare-and-set --------------------------------------------------------------------------
def test_a_write_lands_only_over_what_was_read(pool):
    store = pool.store("S001", FakeClock())
    first = store.read()
    assert first.status == "missing"
    assert store.write(rec(), expect=first.revision) is WriteOutcome.WRITTEN
    assert store.write(rec("S002"), expect=first.revision) is WriteOutcome.CHANGED
    now = store.read()
    assert now.status == "valid" and now.record.node == "S001"
    renewed = rec(seq=1)
    assert store.write(renewed, expect=now.revision) is WriteOutcome.WRITTEN
    assert store.read().record.renew_seq == 1


def test_of_two_writers_that_read_the_same_lease_the_second_loses(pool):
    clock = FakeClock()
    a, b = pool.store("S001", clock), pool.store("S002", clock)
    assert a.write(rec("S001"), expect=a.read().revision) is WriteOutcome.WRITTEN
    seen_a, seen_b = a.read(), b.read()
    assert seen_a.revision == seen_b.revision
    assert a.write(rec("S001", seq=1), expect=seen_a.revision) is WriteOutcome.WRITTEN
    assert b.write(rec("S002", epoch=2), expect=seen_b.revision) is WriteOutcome.CHANGED
    assert b.read().record.node == "S001"


def test_no_write_lands_while_another_store_is_inside_its_write(locking_pool):
    pool = locking_pool
    clock = FakeClock()
    a, b = pool.store("S001", clock), pool.store("S002", clock)
    read = a.read()
    inside: list[WriteOutcome] = []

    def fence() -> bool:  # runs under a's exclusion, at its last moment before writing
        inside.append(b.write(rec("S002"), expect=read.revision))
        return True

    assert a.write(rec("S001"), expect=read.revision, fence=fence) is WriteOutcome.WRITTEN
    assert inside and inside[0] is not WriteOutcome.WRITTEN, inside
    assert b.read().record.node == "S001"


def test_a_lock_left_by_a_dead_writer_is_broken_after_its_bound_never_before(locking_pool):
    pool = locking_pool
    clock = FakeClock()
    store = pool.store("S001", clock)
    pool.put("lock", signed_lock("S009", 1, "dead", TOKEN).encode())
    read = store.read()
    assert store.write(rec(), expect=read.revision) is WriteOutcome.BUSY
    clock.advance(STALE_S - 0.1)
    assert store.write(rec(), expect=read.revision) is WriteOutcome.BUSY
    clock.advance(0.2)
    assert store.write(rec(), expect=read.revision) is WriteOutcome.WRITTEN
    assert store.read().record.node == "S001"


# -- epochs -----------------------------------------------------------------------------------
def test_two_contenders_never_take_the_same_epoch(pool):
    """Two stores with a gate each (as two machines have) race for the lease on
    threads of their own; the lease is deleted now and then while nobody leads."""
    clock = FakeClock()
    stores = [pool.store("S001", clock, timeout=5.0), pool.store("S002", clock, timeout=5.01)]
    won: list[tuple[str, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(len(stores))

    def contend(store: FileLeaseStore) -> None:
        start.wait()
        for i in range(6):
            read = store.read()
            claim = member(store.node, i + 1)
            outcome, record = store.acquire(
                lambda e, n=store.node: rec(n, e), read.revision, known_epoch=0, member=claim
            )
            if outcome is WriteOutcome.WRITTEN:
                with lock:
                    won.append((store.node, record.epoch))
                if i % 2:
                    pool.remove("lease")  # lost while nobody leads: the members' claims remain

    threads = [threading.Thread(target=contend, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    epochs = [e for _, e in won]
    assert len(won) >= 2, won
    assert len(epochs) == len(set(epochs)), f"an epoch was taken twice: {won}"


def test_epochs_are_never_reused_after_the_lease_and_the_members_are_deleted(pool):
    clock = FakeClock()
    a, b = pool.store("S001", clock), pool.store("S002", clock)
    outcome, first = a.acquire(lambda e: rec("S001", e), "", known_epoch=0, member=member("S001"))
    assert outcome is WriteOutcome.WRITTEN and first.epoch == 1
    pool.remove("lease")  # the members' files still carry epoch 1
    outcome, second = b.acquire(
        lambda e: rec("S002", e), b.read().revision, known_epoch=0, member=member("S002")
    )
    assert outcome is WriteOutcome.WRITTEN and second.epoch == 2
    pool.remove("lease")
    pool.remove("members")  # what the pool recorded is gone; what b saw is not
    outcome, third = b.acquire(
        lambda e: rec("S002", e), b.read().revision, known_epoch=second.epoch, member=member("S002", 2)
    )
    assert outcome is WriteOutcome.WRITTEN and third.epoch == 3
    assert a.highest_epoch() == 3


# -- what anyone who can write the share may leave there (docs/design.md §5.4) ----------------------
def test_a_replayed_heartbeat_is_refused_and_the_last_good_one_kept(pool):
    clock = FakeClock()
    writer, reader = pool.store("S002", clock), pool.store("S001", clock)
    writer.write_member(member("S002", seq=3))
    old = {**member("S002", seq=3)}
    old["sig"] = sign(old, TOKEN)
    writer.write_member(member("S002", seq=9))
    assert reader.read_members()["S002"]["seq"] == 9
    pool.put("members/S002.json", json.dumps(old).encode())  # a copy taken earlier, put back
    assert reader.read_members()["S002"]["seq"] == 9
    assert reader.refusals.counts["replayed"] == 1


def test_replayed_and_forged_event_lines_are_refused(pool):
    clock = FakeClock()
    sink, tail = events(pool, "S001", clock)
    sink.record("elected", 1, "first")
    sink.record("renewed", 1, "second")
    lines = pool.event_docs("S001")
    assert [e["seq"] for e in tail.new_events()] == [1, 2]
    forged = {**lines[0], "seq": 7, "kind": "promote"}
    pool.plant_events("S001", [lines[0], forged])  # an old line again, and one with its signature moved
    assert tail.new_events() == []
    assert tail.refusals.counts["replayed"] == 1 and tail.refusals.counts["forged"] == 1


def signed(doc: dict) -> dict:
    return {**doc, "sig": sign(doc, TOKEN)}


def test_a_signed_event_with_a_field_of_the_wrong_type_or_out_of_range_is_refused_alone(pool):
    clock = FakeClock()
    sink, tail = events(pool, "S001", clock)
    sink.record("elected", 1, "first")
    sink.record("renewed", 1, "second")
    assert [e["seq"] for e in tail.new_events()] == [1, 2]
    line = {"node": "S001", "kind": "renewed", "at": "2026-06-15T20:30:15+00:00", "reason": ""}
    pool.plant_events("S001", [
        signed({**line, "seq": 3, "epoch": "x"}),
        signed({**line, "seq": 2**63, "epoch": 1}),  # one past what a database column holds
        signed({**line, "seq": 4, "epoch": 2**63, "kind": "elected"}),
        signed({**line, "seq": 5, "epoch": 1, "kind": ["elected"]}),
        signed({**line, "seq": 6, "epoch": 1, "node": 1}),  # the file's node, as a number
        signed({**line, "seq": 7, "epoch": 2, "kind": "elected", "reason": "the rest of the batch"}),
    ])  # fmt: skip
    assert [(e["seq"], e["reason"]) for e in tail.new_events()] == [(7, "the rest of the batch")]
    assert tail.refusals.counts == {"bad_field": 4, "wrong_node": 1}
    assert tail.new_events() == []  # refused once, never read again


def test_a_lease_or_a_heartbeat_with_a_number_no_database_holds_is_no_evidence(pool):
    clock = FakeClock()
    store = pool.store("S001", clock)
    pool.put("lease", rec("S002", epoch=2**63).encode(TOKEN))
    read = store.read()
    assert (read.status, read.cause) == ("corrupt", "bad_field")
    pool.store("S002", clock).write_member({"node": "S002", "seq": 1, "epoch": 3})
    pool.put("members/S003.json", json.dumps(signed({"node": "S003", "seq": 1, "epoch": 2**70})).encode())
    pool.put("members/S004.json", json.dumps(signed({"node": "S004", "seq": "1", "epoch": 1})).encode())
    assert set(store.read_members()) == {"S002"}
    assert store.refusals.counts["bad_field"] == 3
    outcome, won = take(store, "S001")
    assert (outcome, won.epoch) == (WriteOutcome.WRITTEN, 4)  # not 2**70 + 1


def test_a_forged_lease_is_no_evidence_and_is_overwritten(pool):
    clock = FakeClock()
    store = pool.store("S001", clock)
    forged = rec("S666", epoch=99).encode("not-the-pool-key")
    pool.put("lease", forged)
    read = store.read()
    assert read.status == "forged" and read.record is None
    assert store.write(rec(), expect=read.revision) is WriteOutcome.WRITTEN
    assert store.read().record.node == "S001"
    impostor = pool.store("S666", clock, token="not-the-pool-key")
    impostor.write_member({"node": "S666", "seq": 1, "epoch": 10**6})
    assert "S666" not in store.read_members()
    assert store.highest_epoch() < 10**6


def test_oversized_records_are_refused_without_reading_them_whole(pool):
    clock = FakeClock()
    store = pool.store("S001", clock)
    pool.put("lease", b"{" + b" " * (4 << 20) + b"}")
    read = store.read()
    assert read.status == "corrupt" and read.cause == "too_large"
    store.write_member(member("S001"))
    pool.put("members/S002.json", b"[" * (2 << 20))
    assert set(store.read_members()) == {"S001"}
    assert store.refusals.counts["too_large"] >= 1
    assert store.write(rec(), expect=read.revision) is WriteOutcome.WRITTEN  # the next write heals it


# -- more of the contract (from the etcd backend's suite, on every backend) --------------------
def take(store, node: str, known: int = 0, expect: str | None = None, seq: int = 1):  # type: ignore[no-untyped-def]
    expect = store.read().revision if expect is None else expect
    return store.acquire(lambda e: rec(node, e), expect, known, member(node, seq))


def test_a_released_record_is_seen_by_the_others_with_its_handoff(pool):
    clock = FakeClock()
    s1, s2 = pool.store("S001", clock), pool.store("S002", clock)
    outcome, won = take(s1, "S001")
    assert outcome is WriteOutcome.WRITTEN
    released = LeaseRecord(**{**won.to_doc(), "renew_seq": 1, "ttl_s": 0, "handoff_to": "S002"})
    assert s1.write(released, expect=s1.read().revision) is WriteOutcome.WRITTEN
    seen = s2.read()
    assert seen.status == "valid" and seen.record.released and seen.record.handoff_to == "S002"


@pytest.mark.parametrize(
    "case, lease_epoch, member_epoch, known, expected",
    [
        ("the lease's epoch is the highest", 5, 3, 0, 6),
        ("a member's claim is the highest", 2, 9, 0, 10),
        ("the caller knows the highest", 2, 3, 12, 13),
        ("an empty pool starts at one", None, None, 0, 1),
    ],
)
def test_an_election_takes_one_more_than_the_highest_epoch_known(pool, case, lease_epoch, member_epoch, known,
                                                                 expected):  # fmt: skip
    clock = FakeClock()
    store = pool.store("S001", clock)
    if lease_epoch is not None:
        pool.store("S002", clock).write(rec("S002", lease_epoch), expect=store.read().revision)
    if member_epoch is not None:
        pool.store("S004", clock).write_member({"node": "S004", "seq": 1, "epoch": member_epoch})
    outcome, won = take(store, "S001", known)
    assert (outcome, won.epoch) == (WriteOutcome.WRITTEN, expected)
    other = pool.store("S005", clock)
    assert other.read().record.epoch == expected
    assert other.read_members()["S001"]["epoch"] == expected  # the claim is on record
    assert other.highest_epoch() == expected


def test_an_election_over_a_changed_lease_loses_and_claims_nothing(pool):
    clock = FakeClock()
    s1, s2 = pool.store("S001", clock), pool.store("S002", clock)
    stale = s1.read().revision
    assert take(s2, "S002", expect=stale)[0] is WriteOutcome.WRITTEN
    assert take(s1, "S001", expect=stale) == (WriteOutcome.CHANGED, None)
    assert "S001" not in s1.read_members()
    assert s1.read().record.node == "S002"


def test_a_heartbeat_never_lowers_the_recorded_epoch_or_seq_even_after_a_restart(pool):
    clock = FakeClock()
    pool.store("S002", clock).write_member({"node": "S002", "seq": 1_000, "epoch": 8})
    pool.store("S002", clock).write_member({"node": "S002", "seq": 5, "epoch": 3})  # restarted, knows less
    doc = pool.store("S001", clock).read_members()["S002"]
    assert (doc["seq"], doc["epoch"]) == (1_001, 8)


@pytest.mark.parametrize(
    "raw, cause",
    [
        (b"", "not_json"),
        (b"{not json", "not_json"),
        (b"[" * 10_000, "too_deep"),
        (json.dumps({"node": "S001"}).encode(), "not_object"),
    ],
    ids=["empty", "not-json", "deep", "fields-missing"],
)
def test_damaged_leases_are_corrupt_and_counted(pool, raw, cause):
    store = pool.store("S001", FakeClock())
    pool.put("lease", raw)
    read = store.read()
    assert (read.status, read.cause) == ("corrupt", cause)
    assert store.refusals.counts.get(cause, 0) >= 1


def lone_surrogate(doc: dict, where: str = "value") -> bytes:
    """`doc` as JSON with a lone surrogate escape (`"\\ud800"`) in a value or a key, and a signature
    that cannot be checked: what a share writer without the key can put in any record."""
    doc = {**doc, "station": "S\ud800"} if where == "value" else {**doc, "\udfff": 1}
    return json.dumps({**doc, "sig": "00" * 32}).encode()  # ensure_ascii: the escape, as a writer puts it


@pytest.mark.parametrize("where", ["value", "key"])
def test_a_lone_surrogate_in_any_record_is_no_evidence_counted_and_healed(pool, where):
    """The escape parses (json.loads takes it), and canonical_json(...).encode() raised in the
    signature check of every reader: one such file stopped every election (issue 40)."""
    clock = FakeClock()
    store = pool.store("S001", clock)
    store.write_member(member("S001"))
    pool.put("lease", lone_surrogate(rec("S002", epoch=5).to_doc(), where))
    read = store.read()
    assert (read.status, read.cause) == ("corrupt", "unencodable")
    pool.put("members/S003.json", lone_surrogate({"node": "S003", "seq": 1, "epoch": 9}, where))
    assert set(store.read_members()) == {"S001"}
    assert store.highest_epoch() == 0  # neither the lease's 5 nor the member's 9 counts
    sink = events(pool, "S002", clock)[0]
    sink.record("elected", 1, "first")
    line = {"node": "S002", "seq": 2, "kind": "renewed", "at": "2026-06-15T20:30:15+00:00", "reason": ""}
    pool.plant_events("S002", [{**line, "reason": "\ud800", "sig": "00" * 32}])
    reader = events(pool, "S001", clock)[1]
    assert [e["seq"] for e in reader.new_events()] == [1]
    assert reader.refusals.counts.get("unencodable", 0) == 1
    assert store.refusals.counts.get("unencodable", 0) >= 2
    assert store.write(rec(), expect=read.revision) is WriteOutcome.WRITTEN  # the next write heals it
    assert store.read().record.node == "S001"


def test_member_records_must_be_validly_signed_and_name_their_own_node(pool):
    clock = FakeClock()
    store = pool.store("S001", clock)
    pool.store("S002", clock).write_member({"node": "S002", "seq": 5, "epoch": 1})
    doc = {"node": "S001", "seq": 99, "epoch": 1}
    pool.put("members/S003.json", json.dumps({**doc, "sig": sign(doc, TOKEN)}).encode())  # another's name
    pool.put("members/S004.json", json.dumps({"node": "S004", "seq": 1, "epoch": 10**6}).encode())
    doc = {"node": "S006", "seq": 1, "epoch": 10**6}
    pool.put("members/S006.json", json.dumps({**doc, "sig": sign(doc, "another-key")}).encode())
    assert set(store.read_members()) == {"S002"}
    assert {"wrong_node", "unsigned", "forged"} <= set(store.refusals.counts)
    assert store.highest_epoch() == 1  # no planted epoch counts


def test_a_new_writer_of_a_node_knows_the_highest_seq_the_pool_holds_for_it(pool):
    # What an agent with a fresh database starts above (DbEventSink): never a seq taken before.
    clock = FakeClock()
    sink, _ = events(pool, "S001", clock)
    for i in range(3):
        sink.record("renewed", 1, f"event {i}")
    again, _ = events(pool, "S001", clock)
    fresh, _ = events(pool, "S002", clock)
    assert (again.last_seq(), fresh.last_seq(), sink.last_seq()) == (3, 0, 3)


# -- the event log: each backend's streams, the one record layer above them ---------------------
def test_each_nodes_lines_are_read_once_in_order_and_an_append_never_overwrites_one(pool):
    clock = FakeClock()
    a, tail = events(pool, "S001", clock)
    b, _ = events(pool, "S002", clock)
    for i in range(3):
        a.record("renewed", 1, f"a{i}")
        b.record("renewed", 1, f"b{i}")
    seen = tail.new_events()
    assert [(e["seq"], e["reason"]) for e in seen if e["node"] == "S001"] == [(1, "a0"), (2, "a1"), (3, "a2")]
    assert [(e["seq"], e["reason"]) for e in seen if e["node"] == "S002"] == [(1, "b0"), (2, "b1"), (3, "b2")]
    assert tail.new_events() == []
    before = pool.event_docs("S001")
    line = signed({k: v for k, v in before[-1].items() if k != "sig"} | {"reason": "written again"})
    try:  # seq 3 once more, at the port: after the lines there (a share), or refused (etcd's key)
        a.streams.run(lambda: a.streams.append("S001", 3, json.dumps(line).encode()))
    except OSError:
        assert pool.name == "etcd", pool.name
    assert pool.event_docs("S001")[:3] == before  # never over a line there
    a.record("elected", 2, "next")
    assert [(e["seq"], e["reason"]) for e in tail.new_events()] == [(4, "next")]
    assert tail.refusals.counts.get("replayed", 0) == (0 if pool.name == "etcd" else 1)


def test_an_event_is_kept_as_design_6_says_byte_for_byte(pool):
    clock = FakeClock()
    sink, tail = events(pool, "S001", clock)
    sink.record("elected", 2, "Zürich → 台北", via="S002")
    sink.record("renewed", 2, "")
    docs = pool.event_docs("S001")
    assert list(docs[0]) == ["node", "seq", "kind", "epoch", "at", "reason", "via", "sig"]
    assert docs[0]["sig"] == sign({k: v for k, v in docs[0].items() if k != "sig"}, TOKEN)
    lines = [json.dumps(doc, ensure_ascii=False).encode() for doc in docs]  # one line, UTF-8, as written
    kept = pool.event_bytes("S001")
    if pool.name in ("local", "smb"):  # events/<node>.jsonl, one line each
        assert kept == [("events/S001.jsonl", b"".join(line + b"\n" for line in lines))]
    elif pool.name == "etcd":  # events/<node>/<seq, twelve digits>, one line each
        assert kept == [("events/S001/000000000001", lines[0]), ("events/S001/000000000002", lines[1])]
    else:
        assert [raw for _, raw in kept] == lines
    assert [e["reason"] for e in tail.new_events()] == ["Zürich → 台北", ""]


def test_a_read_is_bounded_and_what_is_left_is_read_on_in_order_over_later_calls(pool):
    clock = FakeClock()
    sink, tail = events(pool, "S001", clock)
    written = 100
    for _ in range(written):  # ~800 KiB: more than one call reads of a file, or of keys
        sink.record("renewed", 1, "x" * 8000)
    got = tail.new_events()
    assert 0 < len(got) < written and tail.backlog
    calls = 1
    while tail.backlog and calls < 50:
        got += tail.new_events()
        calls += 1
    assert [e["seq"] for e in got] == list(range(1, written + 1))
    assert tail.new_events() == [] and not tail.backlog and tail.refusals.total() == 0


def test_a_line_unsigned_or_of_another_node_is_refused_counted_once_and_moved_past(pool):
    clock = FakeClock()
    sink, tail = events(pool, "S001", clock)
    sink.record("elected", 1, "first")
    assert [e["seq"] for e in tail.new_events()] == [1]
    line = {"node": "S001", "kind": "renewed", "epoch": 1, "at": "2026-06-15T20:30:15+00:00", "reason": ""}
    pool.plant_events("S001", [
        {**line, "seq": 2},  # no signature
        signed({**line, "seq": 3, "node": "S002"}),  # another node's, in S001's stream
        signed({**line, "seq": 4, "reason": "after them"}),
    ])  # fmt: skip
    assert [(e["seq"], e["reason"]) for e in tail.new_events()] == [(4, "after them")]
    assert tail.refusals.counts == {"unsigned": 1, "wrong_node": 1}
    assert tail.new_events() == [] and tail.refusals.counts == {"unsigned": 1, "wrong_node": 1}


# -- a retired member (`relayctl forget`) ------------------------------------------------------------
def test_a_removed_member_is_gone_for_every_reader_and_its_name_starts_afresh_once_forgotten(pool):
    clock = FakeClock()
    writer, remover, other = pool.store("S002", clock), pool.store("S001", clock), pool.store("S003", clock)
    writer.write_member(member("S002", seq=50))
    assert remover.read_members()["S002"]["seq"] >= 50 and other.read_members()["S002"]["seq"] >= 50
    assert remover.remove_member("S002") is True
    assert "S002" not in remover.read_members() and "S002" not in pool.store("S004", clock).read_members()
    assert remover.remove_member("S002") is False  # nothing left to remove
    with pytest.raises(ValueError):
        remover.remove_member("../relay_leader")
    # Another machine takes the name; its seq starts low. Whoever forgot the member believes it...
    pool.store("S002", clock).write_member(member("S002", seq=3))
    assert remover.read_members()["S002"]["seq"] == 3
    # ...a reader that still remembers the old seq refuses it as a replay, until it forgets too.
    assert other.read_members()["S002"]["seq"] >= 50
    other.forget_member("S002")
    assert other.read_members()["S002"]["seq"] == 3


def test_a_store_measures_this_clock_against_its_own(pool):
    from stkhost.clock import SystemClock

    store = pool.store("S001", SystemClock())
    store.write_member(member("S001"))
    reading = store.measure_clock()
    assert reading is not None and reading.against in ("file server", "etcd", "memory")
    assert abs(reading.offset_s) < reading.error_s + 1.0, reading  # one machine: one clock
    assert reading.error_s < (1.5 if reading.against == "etcd" else 0.5), reading  # etcd's Date: a 1 s grain


# -- the share's witness (issue 38) ------------------------------------------------------------
def wit(node: str = "S001", epoch: int = 1, relies: bool = False) -> WitnessRecord:
    return WitnessRecord("K", node, epoch, relies)


def test_the_witness_record_is_written_only_over_what_was_read_and_the_loser_of_a_race_writes_nothing(pool):
    clock = FakeClock()
    a, b = pool.store("S001", clock), pool.store("S002", clock)
    first = a.read_witness("K")
    assert first.status == "missing"
    assert a.write_witness(wit("S001", 1), first.revision) is WriteOutcome.WRITTEN
    seen_a, seen_b = a.read_witness("K"), b.read_witness("K")
    assert seen_b.valid and seen_b.record == wit("S001", 1)
    # the leader's entry (W2) and the follower's claim (W4) race on the same read: one lands
    assert b.write_witness(wit("S002", 2, relies=True), seen_b.revision) is WriteOutcome.WRITTEN
    assert a.write_witness(wit("S001", 1, relies=True), seen_a.revision) is WriteOutcome.CHANGED
    assert a.read_witness("K").record == wit("S002", 2, relies=True)  # a claim is never overwritten blind
    assert (
        a.write_witness(wit("S001", 3), first.revision) is WriteOutcome.CHANGED
    )  # "no file" is a revision too


HOSTILE_WITNESS = {
    "forged": lambda: wit("S666", 9, True).encode("not-the-pool-key"),
    "unsigned": lambda: json.dumps(wit().to_doc()).encode(),
    "damaged": lambda: wit().encode(TOKEN)[:-7],
    "huge": lambda: b"{" + b" " * (1 << 20) + b"}",
    "deep": lambda: b"[" * 100_000,
    "surrogate": lambda: b'{"v":1,"kmsn":"K","node":"\\ud800","epoch":1,"relies":true,"sig":"00"}',
    "another pool": lambda: WitnessRecord("OTHER", "S001", 1, True).encode(TOKEN),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_WITNESS))
def test_a_hostile_witness_record_is_no_evidence_counted_and_a_new_epoch_may_rewrite_it(pool, kind):
    from elections.core.witness import may_claim_witness, may_enter, may_name, refresh_ok

    clock = FakeClock()
    store = pool.store("S001", clock)
    pool.put("witness", HOSTILE_WITNESS[kind]())
    read = store.read_witness("K")
    assert read.status == "refused" and read.record is None and read.cause
    assert sum(store.refusals.counts.values()) >= 1
    # no evidence: no refresh, no entry, no claim (the TTL path runs on) ...
    assert (
        not refresh_ok(read, "S001", 1) and not may_enter(read, "S001", 1) and not may_claim_witness(read, 1)
    )
    # ... and only a new epoch's own record (W1) replaces it
    assert may_name(read, 2)
    assert store.write_witness(wit("S001", 2), read.revision) is WriteOutcome.WRITTEN
    assert store.read_witness("K").record == wit("S001", 2)


def test_a_witness_record_of_an_epoch_below_one_read_before_is_a_replay(pool):
    clock = FakeClock()
    store = pool.store("S001", clock)
    old = wit("S001", 1, relies=True).encode(TOKEN)
    missing = store.read_witness("K")
    assert store.write_witness(wit("S002", 2, relies=True), missing.revision) is WriteOutcome.WRITTEN
    assert store.read_witness("K").record.epoch == 2
    pool.put("witness", old)  # the old holder's record put back after the claim
    read = store.read_witness("K")
    assert read.status == "refused" and read.cause == "replayed"
    assert store.refusals.counts["replayed"] >= 1
