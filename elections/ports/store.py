"""The `LeaseStore` port and its file backend (DESIGN.md §5.1).

Contract of every backend:
- `read()` returns a `LeaseRead` (valid / missing / corrupt / forged) and raises
  `StoreUnavailable` only when the store itself cannot be reached.
- `write(record, expect, fence)` is compare-and-set: it writes only if the store
  still holds exactly what was read with revision `expect`, and only if `fence()`
  still returns True at the last moment before the write. It returns a
  `WriteOutcome`; losing a race is a normal outcome, not an exception.
- `acquire(make, expect, known_epoch, member)` is the compare-and-set of an
  election: under the same exclusion as `write`, it picks the new epoch as one
  more than the highest the pool has recorded (lease, members' files, and
  `known_epoch`), records the claim in this member's file, then writes the
  lease. Claims are written before the lease and under the lock, so no two
  nodes can ever take the same epoch, even when the lease file is deleted.
- `write_member(doc)` never lowers the epoch recorded in this member's file.

The file backend serializes writers with `relay_leader.lock` (O_CREAT|O_EXCL).
A lock left by a writer that died is broken once this process has seen the
very same lock, unchanged, for `lock_stale_s` on its own monotonic clock; a lock
of this node whose pid is no longer alive is broken at once. No wall clocks of
two machines are ever compared.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from elections.core.lease import LeaseRead, LeaseRecord, parse_lease, revision_of, sign, signature_ok
from elections.errors import StoreUnavailable
from elections.ports.clock import Clock
from elections.ports.host import pid_alive, unlink_quietly, write_atomic

log = logging.getLogger("stkrelay.store")

LEASE_NAME = "relay_leader.json"
LOCK_NAME = "relay_leader.lock"
MEMBERS_DIR = "members"


class WriteOutcome(enum.Enum):
    WRITTEN = "written"
    CHANGED = "changed"  # the store no longer holds what was read: lost the race
    BUSY = "busy"  # another writer holds the lock right now
    FENCED = "fenced"  # fence() said no at the last moment: nothing written


class LeaseStore(Protocol):
    def read(self) -> LeaseRead: ...

    def write(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome: ...

    def acquire(
        self,
        make: Callable[[int], LeaseRecord],
        expect: str,
        known_epoch: int,
        member: dict[str, Any],
    ) -> tuple[WriteOutcome, LeaseRecord | None]: ...

    def highest_epoch(self) -> int: ...

    def write_member(self, doc: dict[str, Any]) -> None: ...

    def read_members(self) -> dict[str, dict[str, Any]]: ...

    def describe(self) -> str: ...


class FileLeaseStore:
    def __init__(
        self,
        lease_dir: str | os.PathLike[str],
        token: str,
        node: str,
        clock: Clock,
        lock_stale_s: float = 2.0,
    ) -> None:
        self.dir = Path(lease_dir)
        self.token = token
        self.node = node
        self.clock = clock
        self.lock_stale_s = lock_stale_s
        self.lease_path = self.dir / LEASE_NAME
        self.lock_path = self.dir / LOCK_NAME
        self._seen: dict[str, tuple[str, float]] = {}  # path -> (content hash, first seen)
        self._my_lock: bytes | None = None

    def describe(self) -> str:
        return f"file:{self.dir}"

    # -- reading -------------------------------------------------------------
    def _read_raw(self, path: Path) -> bytes | None:
        """Open, read, close at once (Windows: a held file blocks os.replace)."""
        try:
            with open(path, "rb") as fh:
                return fh.read(1 << 20)
        except FileNotFoundError:
            if not self.dir.is_dir():
                raise StoreUnavailable(f"lease dir {self.dir} is gone") from None
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc.strerror or exc}") from exc

    def read(self) -> LeaseRead:
        return parse_lease(self._read_raw(self.lease_path), self.token)

    # -- the lock ------------------------------------------------------------
    def _try_lock(self, retry: bool = True) -> bool:
        body = json.dumps({"node": self.node, "pid": os.getpid(), "nonce": secrets.token_hex(8)}).encode()
        try:
            fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            # Broke a stale lock: race for it at once, like everyone else.
            return retry and self._maybe_break_lock() and self._try_lock(retry=False)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create {self.lock_path}: {exc.strerror}") from exc
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        self._my_lock = body
        return True

    def _unlock(self) -> None:
        mine, self._my_lock = self._my_lock, None
        try:
            if self._read_raw(self.lock_path) == mine:
                os.unlink(self.lock_path)
            else:
                log.warning("our lock on %s was broken by another process", self.dir)
        except (OSError, StoreUnavailable):
            pass

    def _aged(self, path: Path, content: bytes) -> float:
        """Seconds this process has seen `path` hold exactly `content`."""
        digest = hashlib.sha256(content).hexdigest()
        now = self.clock.monotonic()
        seen = self._seen.get(str(path))
        if seen is None or seen[0] != digest:
            self._seen[str(path)] = (digest, now)
            return 0.0
        return now - seen[1]

    def _maybe_break_lock(self) -> bool:
        """Break the lock if it is stale. True if this call removed it.

        Breakers serialize on a marker file named after the lock's content, so
        that two breakers of one stale lock cannot remove a fresh lock taken in
        between. A marker left by a breaker that died ages out the same way."""
        try:
            content = self._read_raw(self.lock_path)
        except StoreUnavailable:
            return False
        if content is None:
            return True  # gone already: worth one more try
        owner = _lock_owner(content)
        dead_here = owner is not None and owner[0] == self.node and not pid_alive(owner[1])
        age = self._aged(self.lock_path, content)
        if not dead_here and age < self.lock_stale_s:
            return False
        marker = self.dir / f"{LOCK_NAME}.break-{revision_of(content)[:16]}"
        for _ in range(2):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                break
            except FileExistsError:
                if self._aged(marker, b"marker") < self.lock_stale_s:
                    return False  # someone else is breaking it right now
                unlink_quietly(marker)  # its breaker died
            except OSError:
                return False
        else:
            return False
        try:
            if self._read_raw(self.lock_path) != content:
                return False
            os.unlink(self.lock_path)
            why = f"its pid {owner[1]} is dead" if dead_here and owner else f"unchanged for {age:.1f} s"
            log.warning("broke stale lock %s (%s): %s", self.lock_path, content.decode(errors="replace"), why)
            return True
        except (OSError, StoreUnavailable):
            return False
        finally:
            unlink_quietly(marker)

    # -- writing -------------------------------------------------------------
    def _replace(self, path: Path, data: bytes) -> None:
        try:
            write_atomic(path, data, durable=True, tag=self.node)
        except OSError as exc:
            raise StoreUnavailable(f"cannot write {path}: {exc.strerror or exc}") from exc

    def write(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome:
        if not self._try_lock():
            return WriteOutcome.BUSY
        try:
            if revision_of(self._read_raw(self.lease_path)) != expect:
                return WriteOutcome.CHANGED
            if fence is not None and not fence():
                return WriteOutcome.FENCED
            self._replace(self.lease_path, record.encode(self.token))
            return WriteOutcome.WRITTEN
        finally:
            self._unlock()

    def acquire(
        self,
        make: Callable[[int], LeaseRecord],
        expect: str,
        known_epoch: int,
        member: dict[str, Any],
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        if not self._try_lock():
            return WriteOutcome.BUSY, None
        try:
            if revision_of(self._read_raw(self.lease_path)) != expect:
                return WriteOutcome.CHANGED, None
            record = make(max(known_epoch, self.highest_epoch()) + 1)
            self.write_member(dict(member, epoch=record.epoch))  # the claim, before the lease
            self._replace(self.lease_path, record.encode(self.token))
            return WriteOutcome.WRITTEN, record
        finally:
            self._unlock()

    # -- members' heartbeats ---------------------------------------------------
    def write_member(self, doc: dict[str, Any]) -> None:
        members = self.dir / MEMBERS_DIR
        try:
            members.mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create {members}: {exc.strerror}") from exc
        path = members / f"{doc['node']}.json"
        mine = _member_epoch(self._read_raw(path), self.token)
        if mine > int(doc.get("epoch") or 0):
            doc = dict(doc, epoch=mine)
        body = dict(doc, sig=sign(doc, self.token))
        self._replace(path, json.dumps(body).encode() + b"\n")

    def read_members(self) -> dict[str, dict[str, Any]]:
        """Every validly signed member file; bad ones are skipped (and logged)."""
        members = self.dir / MEMBERS_DIR
        out: dict[str, dict[str, Any]] = {}
        try:
            names = sorted(os.listdir(members))
        except FileNotFoundError:
            return out
        except OSError as exc:
            raise StoreUnavailable(f"cannot list {members}: {exc.strerror}") from exc
        for name in names:
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                doc = json.loads(self._read_raw(members / name) or b"")
            except (ValueError, StoreUnavailable):
                continue
            if isinstance(doc, dict) and signature_ok(doc, self.token):
                out[str(doc.get("node"))] = doc
            else:
                log.warning("ignoring member file %s: unsigned or wrongly signed", name)
        return out

    def highest_epoch(self) -> int:
        best = 0
        lease = self.read()
        if lease.record is not None:
            best = lease.record.epoch
        for doc in self.read_members().values():
            best = max(best, _member_epoch(json.dumps(doc).encode(), self.token))
        return best


def _member_epoch(raw: bytes | None, token: str) -> int:
    try:
        doc = json.loads(raw or b"")
    except ValueError:
        return 0
    if not isinstance(doc, dict) or not signature_ok(doc, token):
        return 0
    epoch = doc.get("epoch")
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 0


def _lock_owner(content: bytes) -> tuple[str, int] | None:
    try:
        doc = json.loads(content)
        return str(doc["node"]), int(doc["pid"])
    except (ValueError, KeyError, TypeError):
        return None
