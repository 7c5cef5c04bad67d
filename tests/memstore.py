"""An in-memory `LeaseStore` for in-process tests of the runtime.

It keeps the file store's contract (`elections/ports/store.py`), so that an
`Elector` driven over it behaves as over the share:

- `read()` returns a real `LeaseRead`: the lease is kept as the bytes
  `LeaseRecord.encode` signs and is parsed with `parse_lease` on every read.
- `write(record, expect, fence)` is compare-and-set on the revision read, and
  asks `fence()` only after the compare, at the last moment before writing.
- `acquire(make, expect, known_epoch, member)` takes one more than
  max(known_epoch, highest recorded epoch), records the claim in the member's
  doc, then writes the lease (`log` keeps that order for tests to see).
- `write_member(doc)` never lowers the epoch already recorded for a member.
- every method raises `StoreUnavailable` while `down` is set.

What it adds for tests: `calls` counts the calls of each protocol method (an
election's internal look at the highest epoch is not a call), `down` makes
it unreachable, `lose_race_once()` makes the next write or acquire lose a race
(BUSY: another writer holds the lock; or CHANGED: a rival's record lands
between the caller's read and its write), and `meanwhile()` runs anything in
that very gap (time passing, another node acting). The helpers tests use to
arrange the store (`put`, `put_raw`, `delete`, `wipe`, `lease`,
`member`) are not counted.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from typing import Any

from elections.core.lease import LeaseRead, LeaseRecord, parse_lease, revision_of, sign, signature_ok
from elections.errors import StoreUnavailable
from elections.ports.store import WriteOutcome

TOKEN = "tok-memory-0123456789"


class MemoryLeaseStore:
    def __init__(self, token: str = TOKEN, name: str = "memory") -> None:
        self.token = token
        self.name = name
        self.raw: bytes | None = None  # the lease file's bytes; None: no file
        self.calls: Counter[str] = Counter()
        self.down = False
        self.log: list[tuple[str, str, int]] = []  # ("member" | "lease", node, epoch), in write order
        self._members: dict[str, dict[str, Any]] = {}  # node -> signed doc
        self._busy = 0
        self._meanwhile: list[Callable[[], None]] = []

    # -- the LeaseStore protocol ---------------------------------------------------
    def read(self) -> LeaseRead:
        self._call("read")
        return parse_lease(self.raw, self.token)

    def write(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome:
        self._call("write")
        if self._lost_lock():
            return WriteOutcome.BUSY
        if revision_of(self.raw) != expect:
            return WriteOutcome.CHANGED
        if fence is not None and not fence():
            return WriteOutcome.FENCED
        self._put_lease(record)
        return WriteOutcome.WRITTEN

    def acquire(
        self,
        make: Callable[[int], LeaseRecord],
        expect: str,
        known_epoch: int,
        member: dict[str, Any],
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        self._call("acquire")
        if self._lost_lock():
            return WriteOutcome.BUSY, None
        if revision_of(self.raw) != expect:
            return WriteOutcome.CHANGED, None
        record = make(max(known_epoch, self._highest()) + 1)
        self._put_member(dict(member, epoch=record.epoch))  # the claim, before the lease
        self._put_lease(record)
        return WriteOutcome.WRITTEN, record

    def highest_epoch(self) -> int:
        self._call("highest_epoch")
        return self._highest()

    def write_member(self, doc: dict[str, Any]) -> None:
        self._call("write_member")
        self._put_member(doc)

    def read_members(self) -> dict[str, dict[str, Any]]:
        self._call("read_members")
        return {n: copy.deepcopy(d) for n, d in sorted(self._members.items()) if signature_ok(d, self.token)}

    def remove_member(self, node: str) -> bool:
        self._call("remove_member")
        return self._members.pop(node, None) is not None

    def forget_member(self, node: str) -> None:
        pass

    def describe(self) -> str:
        self.calls["describe"] += 1  # never unreachable: it only names the store
        return self.name

    # -- arranging a test (not counted) ----------------------------------------------
    def put(self, record: LeaseRecord) -> None:
        """Another writer's signed record lands in the store."""
        self.raw = record.encode(self.token)

    def put_raw(self, raw: bytes | None) -> None:
        """Any bytes at all (damaged, forged), or None for no file."""
        self.raw = raw

    def delete(self) -> None:
        """The lease file is deleted (members' docs stay, as on the share)."""
        self.raw = None

    def wipe(self) -> None:
        """Every file is deleted: the lease and the members' docs."""
        self.raw = None
        self._members.clear()

    @property
    def lease(self) -> LeaseRecord | None:
        """The valid record the store holds now, if any."""
        return parse_lease(self.raw, self.token).record

    def member(self, node: str) -> dict[str, Any] | None:
        doc = self._members.get(node)
        return None if doc is None else copy.deepcopy(doc)

    def lose_race_once(self, rival: LeaseRecord | None = None, busy: bool = False) -> None:
        """The next write or acquire loses: BUSY with `busy`, else CHANGED
        because `rival` is written between the caller's read and its write."""
        if busy:
            self._busy += 1
        else:
            assert rival is not None, "a CHANGED race needs the rival's record"
            self.meanwhile(lambda: self.put(rival))

    def meanwhile(self, fn: Callable[[], None]) -> None:
        """Run `fn` inside the next write or acquire, just before it compares."""
        self._meanwhile.append(fn)

    # -- inside ------------------------------------------------------------------------
    def _call(self, method: str) -> None:
        self.calls[method] += 1
        if self.down:
            raise StoreUnavailable(f"{self.name} is unreachable")

    def _lost_lock(self) -> bool:
        if self._busy:
            self._busy -= 1
            return True
        pending, self._meanwhile = self._meanwhile, []
        for fn in pending:
            fn()
        return False

    def _highest(self) -> int:
        record = self.lease
        best = record.epoch if record is not None else 0
        for doc in self._members.values():
            if signature_ok(doc, self.token):
                best = max(best, _epoch(doc))
        return best

    def _put_lease(self, record: LeaseRecord) -> None:
        self.raw = record.encode(self.token)
        self.log.append(("lease", record.node, record.epoch))

    def _put_member(self, doc: dict[str, Any]) -> None:
        node = str(doc["node"])
        mine = _epoch(self._members.get(node) or {})
        if mine > _epoch(doc):
            doc = dict(doc, epoch=mine)
        doc = {k: v for k, v in doc.items() if k != "sig"}
        self._members[node] = dict(doc, sig=sign(doc, self.token))
        self.log.append(("member", node, _epoch(doc)))


def _epoch(doc: dict[str, Any]) -> int:
    epoch = doc.get("epoch")
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 0
