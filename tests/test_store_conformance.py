"""The `LeaseStore` contract (elections/ports/store.py), the same tests for every
backend: the file share and etcd (a real 3-member cluster), with SMB to plug
in as one more `Backend`.

A `Backend` opens stores of one pool for several nodes and knows how to do to
its medium what an outsider can: plant bytes where the lease or a member's
record belongs, delete the lease, delete everything, make it unreachable.
Every test below uses only the protocol and those arrangers, so a backend
passes exactly when it keeps the file store's contract: compare-and-set,
exclusion of two contenders, epochs never taken twice (also after deletes),
and forged, replayed, misnamed and oversized records refused as no evidence.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elections.core.lease import LeaseRecord, sign
from elections.errors import StoreUnavailable
from elections.ports.clock import FakeClock
from elections.ports.store import FileLeaseStore, WriteOutcome

TOKEN = "tok-conformance-0123456789"


def rec(node: str = "S001", epoch: int = 1, seq: int = 0, ttl: float = 10, handoff_to: str | None = None):
    return LeaseRecord(kmsn="K", station=node, ip="127.0.0.1", port=9530, pid=os.getpid(), epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=ttl,
                       handoff_to=handoff_to)  # fmt: skip


def signed_member(doc: dict[str, Any], token: str = TOKEN) -> bytes:
    return json.dumps({**doc, "sig": sign(doc, token)}).encode()


class Backend:
    """One pool on one medium, as the tests need it."""

    name = "?"

    def store(self, node: str, token: str = TOKEN) -> Any:
        raise NotImplementedError

    def plant_lease(self, raw: bytes) -> None:
        raise NotImplementedError

    def plant_member(self, node: str, raw: bytes) -> None:
        raise NotImplementedError

    def member_raw(self, node: str) -> bytes:
        raise NotImplementedError

    def delete_lease(self) -> None:
        raise NotImplementedError

    def wipe(self) -> None:
        """Everything of the pool is deleted (lease, counter, members)."""
        raise NotImplementedError

    def make_unreachable(self) -> None:
        raise NotImplementedError


class FileBackend(Backend):
    name = "file"

    def __init__(self, root: Path) -> None:
        self.dir = root / "share"
        self.dir.mkdir()
        self.clock = FakeClock()

    def store(self, node: str, token: str = TOKEN) -> FileLeaseStore:
        return FileLeaseStore(self.dir, token, node, self.clock)

    def plant_lease(self, raw: bytes) -> None:
        (self.dir / "relay_leader.json").write_bytes(raw)

    def plant_member(self, node: str, raw: bytes) -> None:
        (self.dir / "members").mkdir(exist_ok=True)
        (self.dir / "members" / f"{node}.json").write_bytes(raw)

    def member_raw(self, node: str) -> bytes:
        return (self.dir / "members" / f"{node}.json").read_bytes()

    def delete_lease(self) -> None:
        (self.dir / "relay_leader.json").unlink(missing_ok=True)

    def wipe(self) -> None:
        shutil.rmtree(self.dir)
        self.dir.mkdir()

    def make_unreachable(self) -> None:
        shutil.rmtree(self.dir)


class EtcdBackend(Backend):
    name = "etcd"

    def __init__(self, cluster: Any) -> None:
        from elections.ports.etcd.pool import EtcdPool

        self.cluster = cluster
        self.prefix = f"/stkrelay-test/{uuid.uuid4().hex[:12]}/"
        self.pool = EtcdPool([m.url for m in cluster.members], self.prefix, timeout=2.0, fallback=2.0)
        self.clock = FakeClock()
        self._stores: list[Any] = []

    def store(self, node: str, token: str = TOKEN) -> Any:
        from elections.ports.etcd.store import EtcdLeaseStore

        s = EtcdLeaseStore(self.pool, token, node, self.clock)
        self._stores.append(s)
        return s

    def _put(self, rel: str, raw: bytes) -> None:
        from elections.ports.etcd.client import b64

        self.pool.client.call("kv/put", {"key": b64(self.prefix + rel), "value": b64(raw)})
        self.pool.touched(self.pool.part_of(self.prefix + rel) or "lease")

    def _delete(self, rel: str, prefix: bool = False) -> None:
        from elections.ports.etcd.client import b64, prefix_end

        body = {"key": b64(self.prefix + rel)}
        if prefix:
            body["range_end"] = b64(prefix_end(self.prefix + rel))
        self.pool.client.call("kv/deleterange", body)
        for part in ("lease", "members", "events"):
            self.pool.touched(part)

    def plant_lease(self, raw: bytes) -> None:
        self._put("pool/leader", raw)

    def plant_member(self, node: str, raw: bytes) -> None:
        self._put(f"pool/members/{node}", raw)

    def member_raw(self, node: str) -> bytes:
        kv = self.pool.get(f"pool/members/{node}", 1 << 20)
        assert kv is not None and kv.value is not None
        return kv.value

    def delete_lease(self) -> None:
        self._delete("pool/leader")

    def wipe(self) -> None:
        self._delete("", prefix=True)

    def make_unreachable(self) -> None:
        """Stores opened from now on see the pool through members that refuse every connection."""
        from harness import free_port

        from elections.ports.etcd.pool import EtcdPool

        dead = [f"http://127.0.0.1:{free_port()}" for _ in range(3)]
        self.pool = EtcdPool(dead, self.prefix, timeout=1.0)


@pytest.fixture(params=["file", "etcd"])
def backend(request, tmp_path) -> Backend:
    if request.param == "file":
        return FileBackend(tmp_path)
    return EtcdBackend(request.getfixturevalue("etcd_cluster"))


def acquire(store: Any, node: str, known: int = 0, expect: str | None = None, seq: int = 1):
    expect = store.read().revision if expect is None else expect
    return store.acquire(lambda e: rec(node, e), expect, known, {"node": node, "seq": seq})


# -- compare-and-set ---------------------------------------------------------------------
def test_it_writes_only_over_what_it_read(backend):
    s1 = backend.store("S001")
    first = s1.read()
    assert first.status == "missing"
    assert s1.write(rec(), expect=first.revision) is WriteOutcome.WRITTEN
    # A second writer that read "missing" earlier loses: the lease changed.
    assert backend.store("S002").write(rec("S002"), expect=first.revision) is WriteOutcome.CHANGED
    now = backend.store("S003").read()
    assert (now.status, now.record.node) == ("valid", "S001")
    assert s1.write(rec(seq=1), expect=now.revision) is WriteOutcome.WRITTEN
    assert backend.store("S003").read().record.renew_seq == 1


def test_a_fence_is_asked_after_the_compare_and_a_no_writes_nothing(backend):
    store = backend.store("S001")
    asked: list[bool] = []

    def fence() -> bool:
        asked.append(True)
        return False

    assert store.write(rec(), expect="not-what-is-there", fence=fence) is WriteOutcome.CHANGED
    assert store.write(rec(), expect=store.read().revision, fence=fence) is WriteOutcome.FENCED
    assert asked and store.read().status == "missing"


def test_a_released_record_is_seen_by_the_others_with_its_handoff(backend):
    s1 = backend.store("S001")
    outcome, won = acquire(s1, "S001")
    assert outcome is WriteOutcome.WRITTEN
    released = rec("S001", won.epoch, seq=1, ttl=0, handoff_to="S002")
    assert s1.write(released, expect=s1.read().revision) is WriteOutcome.WRITTEN
    seen = backend.store("S002").read()
    assert seen.status == "valid" and seen.record.released and seen.record.handoff_to == "S002"


# -- elections: exclusion and epochs ------------------------------------------------------
@pytest.mark.parametrize(
    "case, lease_epoch, member_epoch, known, expected",
    [
        ("the lease's epoch is the highest", 5, 3, 0, 6),
        ("a member's claim is the highest", 2, 9, 0, 10),
        ("the caller knows the highest", 2, 3, 12, 13),
        ("an empty pool starts at one", None, None, 0, 1),
    ],
)
def test_an_election_takes_one_more_than_the_highest_epoch_known(backend, case, lease_epoch, member_epoch,
                                                                 known, expected):  # fmt: skip
    store = backend.store("S001")
    if lease_epoch is not None:
        backend.store("S002").write(rec("S002", lease_epoch), expect=store.read().revision)
    if member_epoch is not None:
        backend.store("S004").write_member({"node": "S004", "seq": 1, "epoch": member_epoch})
    outcome, won = acquire(store, "S001", known)
    assert (outcome, won.epoch) == (WriteOutcome.WRITTEN, expected)
    other = backend.store("S005")
    assert other.read().record.epoch == expected
    assert other.read_members()["S001"]["epoch"] == expected  # the claim is on record
    assert other.highest_epoch() == expected


def test_an_election_over_a_changed_lease_loses_and_claims_nothing(backend):
    s1, s2 = backend.store("S001"), backend.store("S002")
    stale = s1.read().revision
    assert acquire(s2, "S002", expect=stale)[0] is WriteOutcome.WRITTEN
    outcome, won = acquire(s1, "S001", expect=stale)
    assert (outcome, won) == (WriteOutcome.CHANGED, None)
    assert "S001" not in s1.read_members()
    assert s1.read().record.node == "S002"


def test_two_contenders_on_one_read_never_both_win_and_never_share_an_epoch(backend):
    stores = [backend.store(f"S00{i}") for i in (1, 2)]
    epochs: list[int] = []
    for _ in range(6):
        expect = stores[0].read().revision
        results: dict[str, Any] = {}
        barrier = threading.Barrier(2)

        def contend(store: Any, barrier: Any = barrier, expect: str = expect, results: dict = results):
            barrier.wait()
            for _ in range(50):  # a busy lock is "try again after a backoff", as the elector does
                out = acquire(store, store.node, expect=expect)
                if out[0] is not WriteOutcome.BUSY:
                    break
                time.sleep(0.02)
            results[store.node] = out

        threads = [threading.Thread(target=contend, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        won = [r for r in results.values() if r[0] is WriteOutcome.WRITTEN]
        assert len(results) == 2 and len(won) == 1, results
        epochs.append(won[0][1].epoch)
        backend.clock.advance(3)  # a lock left behind is stale by now on any clock
    assert epochs == sorted(set(epochs)), epochs


def test_epochs_are_never_taken_again_after_the_lease_or_everything_is_deleted(backend):
    s1, s2 = backend.store("S001"), backend.store("S002")
    assert acquire(s1, "S001")[1].epoch == 1
    backend.delete_lease()  # while nobody leads: the claim still counts
    assert acquire(s2, "S002")[1].epoch == 2
    backend.delete_lease()
    assert acquire(s1, "S001")[1].epoch == 3
    backend.wipe()  # everything: only what the contender remembers is left
    assert acquire(s2, "S002", known=3)[1].epoch == 4
    assert backend.store("S003").highest_epoch() == 4


def test_a_heartbeat_never_lowers_the_recorded_epoch_or_seq_even_after_a_restart(backend):
    backend.store("S002").write_member({"node": "S002", "seq": 1_000, "epoch": 8})
    backend.store("S002").write_member({"node": "S002", "seq": 5, "epoch": 3})  # restarted, knows less
    doc = backend.store("S001").read_members()["S002"]
    assert (doc["seq"], doc["epoch"]) == (1_001, 8)


# -- what an outsider can leave in the store (DESIGN.md §5.4) --------------------------------
def test_a_forged_lease_is_no_evidence_and_the_holder_writes_over_it(backend):
    store = backend.store("S001")
    backend.plant_lease(rec("S666", 99).encode("another-key"))
    read = store.read()
    assert (read.status, read.cause) == ("forged", "forged")
    assert store.write(rec("S001", 1), expect=read.revision) is WriteOutcome.WRITTEN
    assert store.read().status == "valid"
    assert store.highest_epoch() == 1  # the forged epoch counts for nothing


@pytest.mark.parametrize(
    "raw, cause",
    [
        (b"", "not_json"),
        (b"{not json", "not_json"),
        (b"[" * 10_000, "too_deep"),
        (b" " * 100_000, "too_large"),
        (json.dumps({"node": "S001"}).encode(), "not_object"),
    ],
)
def test_damaged_or_oversized_leases_are_corrupt_and_counted(backend, raw, cause):
    store = backend.store("S001")
    backend.plant_lease(raw)
    read = store.read()
    assert (read.status, read.cause) == ("corrupt", cause)
    assert store.refusals.counts.get(cause, 0) >= 1


def test_member_records_must_be_signed_name_their_own_node_and_only_move_forward(backend):
    store = backend.store("S001")
    backend.store("S002").write_member({"node": "S002", "seq": 5, "epoch": 1})
    old = backend.member_raw("S002")
    backend.store("S002").write_member({"node": "S002", "seq": 9, "epoch": 1})
    assert store.read_members()["S002"]["seq"] == 9
    backend.plant_member("S002", old)  # a replayed older heartbeat
    assert store.read_members()["S002"]["seq"] == 9 and store.refusals.counts["replayed"] == 1
    backend.plant_member("S003", signed_member({"node": "S001", "seq": 99, "epoch": 1}))
    backend.plant_member("S004", json.dumps({"node": "S004", "seq": 1, "epoch": 10**6}).encode())
    backend.plant_member("S005", b"[" * 50_000)
    backend.plant_member("S006", signed_member({"node": "S006", "seq": 1, "epoch": 10**6}, "another-key"))
    assert set(store.read_members()) == {"S002"}
    assert {"wrong_node", "unsigned", "forged"} <= set(store.refusals.counts)
    assert store.refusals.counts.get("too_large", 0) + store.refusals.counts.get("too_deep", 0) >= 1
    assert store.highest_epoch() == 1  # no planted epoch counts


def test_an_unreachable_store_raises_store_unavailable(backend):
    store = backend.store("S001")
    read = store.read()
    backend.make_unreachable()
    store = backend.store("S001")
    calls: list[Callable[[], Any]] = [
        store.read,
        lambda: store.write(rec(), expect=read.revision),
        lambda: acquire(store, "S001", expect=read.revision),
        lambda: store.write_member({"node": "S001", "seq": 1, "epoch": 1}),
        store.highest_epoch,
    ]
    for call in calls:
        with pytest.raises(StoreUnavailable):
            call()
