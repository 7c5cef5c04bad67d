"""An in-memory `LeaseStore` for in-process tests of the runtime: the real record
layer (`elections.ports.store.records.PoolStore`: signed, verified, refused, seq and
epoch never going down) over the real dict backend
(`elections.ports.store.memory_backend.MemoryBackend`), which also runs the
conformance suite (`tests/test_store_conformance.py`, the `memory` pool).

What it adds for tests: `calls` counts the calls of each protocol method (an
election's internal look at the highest epoch is not a call), `down` makes
it unreachable, `lose_race_once()` makes the next write or acquire lose a race
(BUSY: another writer holds the lock; or CHANGED: a rival's record lands
between the caller's read and its write), `meanwhile()` runs anything in
that very gap (time passing, another node acting), and `log` keeps the order
of the writes (("member" | "lease", node, epoch)). The helpers tests use to
arrange the store (`put`, `put_raw`, `delete`, `wipe`, `lease`, `member`)
are not counted.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from elections.core.lease import LeaseRead, LeaseRecord, parse_lease
from elections.errors import StoreUnavailable
from elections.ports.store.backend import LEASE_KEY, Build, Claimed, WriteOutcome, member_key
from elections.ports.store.memory_backend import MemoryBackend
from elections.ports.store.records import PoolStore
from stkhost.clock import Clock, SystemClock

TOKEN = "tok-memory-0123456789"


class TestBackend(MemoryBackend):
    """The dict backend, with a test's hooks: unreachable, a race lost, a gap."""

    __test__ = False

    def __init__(self, name: str = "memory") -> None:
        super().__init__(name)
        self.down = False
        self.log: list[tuple[str, str, int]] = []
        self._busy = 0
        self._meanwhile: list[Callable[[], None]] = []

    def run(self, fn):  # type: ignore[no-untyped-def]
        if self.down:
            raise StoreUnavailable(f"{self.name} is unreachable")
        return super().run(fn)

    def _logged(self, key: str, data: bytes) -> None:
        doc = json.loads(data)
        self.log.append(
            ("lease" if key == LEASE_KEY else "member", str(doc.get("node")), doc.get("epoch", 0))
        )

    def _lost_lock(self) -> bool:
        if self._busy:
            self._busy -= 1
            return True
        pending, self._meanwhile = self._meanwhile, []
        for fn in pending:
            fn()
        return False

    def cas(self, key, data, expected, fence=None, hold_s=None, renewal=False):  # type: ignore[no-untyped-def]
        if key == LEASE_KEY and self._lost_lock():
            return WriteOutcome.BUSY, ""
        outcome, revision = super().cas(key, data, expected, fence, hold_s, renewal)
        if outcome is WriteOutcome.WRITTEN:
            self._logged(key, data)
        return outcome, revision

    def claim(self, expect: str, build: Build) -> Claimed:
        if self._lost_lock():
            return Claimed(WriteOutcome.BUSY)
        writes: list = []

        def kept(lease):  # type: ignore[no-untyped-def]
            writes[:] = list(build(lease) or ())
            return writes

        claimed = super().claim(expect, kept)
        if claimed.outcome is WriteOutcome.WRITTEN:
            for write in writes:
                self._logged(write.key, write.data)
        return claimed


class MemoryLeaseStore(PoolStore):
    def __init__(self, token: str = TOKEN, name: str = "memory", clock: Clock | None = None,
                 node: str = "memory") -> None:  # fmt: skip
        super().__init__(TestBackend(name), token, node, clock or SystemClock())
        self.memory: TestBackend = self.backend  # type: ignore[assignment]
        self.name = name
        self.calls: Counter[str] = Counter()

    # -- counted: the LeaseStore protocol -----------------------------------------------
    def read(self) -> LeaseRead:
        self.calls["read"] += 1
        return super().read()

    def write(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome:
        self.calls["write"] += 1
        return super().write(record, expect, fence)

    def acquire(self, make, expect, known_epoch, member):  # type: ignore[no-untyped-def]
        self.calls["acquire"] += 1
        return super().acquire(make, expect, known_epoch, member)

    def highest_epoch(self) -> int:
        self.calls["highest_epoch"] += 1
        return super().highest_epoch()

    def write_member(self, doc: dict[str, Any]) -> None:
        self.calls["write_member"] += 1
        super().write_member(doc)

    def read_members(self) -> dict[str, dict[str, Any]]:
        self.calls["read_members"] += 1
        return super().read_members()

    def remove_member(self, node: str) -> bool:
        self.calls["remove_member"] += 1
        return super().remove_member(node)

    def describe(self) -> str:
        self.calls["describe"] += 1  # never unreachable: it only names the store
        return self.name

    # -- the test's hooks ----------------------------------------------------------------
    @property
    def down(self) -> bool:
        return self.memory.down

    @down.setter
    def down(self, value: bool) -> None:
        self.memory.down = value

    @property
    def log(self) -> list[tuple[str, str, int]]:
        return self.memory.log

    @property
    def raw(self) -> bytes | None:
        return self.memory.data.get(LEASE_KEY)

    def put(self, record: LeaseRecord) -> None:
        """Another writer's signed record lands in the store."""
        self.memory.put(LEASE_KEY, record.encode(self.pool_key))

    def put_raw(self, raw: bytes | None) -> None:
        """Any bytes at all (damaged, forged), or None for no record."""
        self.memory.put(LEASE_KEY, raw)

    def delete(self) -> None:
        """The lease is deleted (members' records stay, as on the share)."""
        self.memory.put(LEASE_KEY, None)

    def wipe(self) -> None:
        """Every record is deleted: the lease and the members'."""
        for key in list(self.memory.data):
            self.memory.put(key, None)
        self._own = None

    @property
    def lease(self) -> LeaseRecord | None:
        """The valid record the store holds now, if any."""
        return parse_lease(self.raw, self.pool_key).record

    def member(self, node: str) -> dict[str, Any] | None:
        raw = self.memory.data.get(member_key(node))
        return None if raw is None else json.loads(raw)

    def lose_race_once(self, rival: LeaseRecord | None = None, busy: bool = False) -> None:
        """The next write or acquire loses: BUSY with `busy`, else CHANGED
        because `rival` is written between the caller's read and its write."""
        if busy:
            self.memory._busy += 1
        else:
            assert rival is not None, "a CHANGED race needs the rival's record"
            self.meanwhile(lambda: self.put(rival))

    def meanwhile(self, fn: Callable[[], None]) -> None:
        """Run `fn` inside the next write or acquire, just before it compares."""
        self.memory._meanwhile.append(fn)
