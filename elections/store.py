"""The `LeaseStore` port and its file backend (DESIGN.md §5.1).

Contract of every backend:
- `read()` returns a `LeaseRead` (valid / missing / corrupt / forged) and raises
  `StoreUnavailable` only when the store itself cannot be reached.
- `write(record, expect, fence)` is compare-and-set: it writes only if the store
  still holds exactly what was read with revision `expect`, and only if `fence()`
  still returns True at the last moment before the write. It returns a
  `WriteOutcome`; losing a race is a normal outcome, not an exception.
- `highest_epoch()` is the highest epoch the pool has recorded anywhere the store
  can see (lease and members' files), so that an epoch is never reused even when
  the lease file is deleted or corrupted.

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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .clock import Clock
from .errors import StoreUnavailable
from .lease import LeaseRead, LeaseRecord, parse_lease, revision_of, sign, signature_ok

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

    def highest_epoch(self) -> int: ...

    def write_member(self, doc: dict[str, Any]) -> None: ...

    def describe(self) -> str: ...


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    def _try_lock(self) -> bool:
        body = json.dumps(
            {"node": self.node, "pid": os.getpid(), "nonce": secrets.token_hex(8)}
        ).encode()
        try:
            fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            self._maybe_break_lock()
            return False
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

    def _maybe_break_lock(self) -> None:
        try:
            content = self._read_raw(self.lock_path)
        except StoreUnavailable:
            return
        if content is None:
            return
        owner = _lock_owner(content)
        dead_here = owner is not None and owner[0] == self.node and not pid_alive(owner[1])
        age = self._aged(self.lock_path, content)
        if not dead_here and age < self.lock_stale_s:
            return
        marker = self.dir / f"{LOCK_NAME}.break-{revision_of(content)[:16]}"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            # Someone is breaking it; a breaker that died leaves its marker: age it too.
            if self._aged(marker, b"marker") >= self.lock_stale_s:
                _unlink_quietly(marker)
            return
        except OSError:
            return
        os.close(fd)
        try:
            if self._read_raw(self.lock_path) == content:
                os.unlink(self.lock_path)
                why = f"its pid {owner[1]} is dead" if dead_here else f"unchanged for {age:.1f} s"
                log.warning("broke stale lock %s (%s): %s", self.lock_path, content.decode(errors="replace"), why)
        except (OSError, StoreUnavailable):
            pass
        finally:
            _unlink_quietly(marker)

    # -- writing -------------------------------------------------------------
    def _replace(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{self.node}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            for attempt in range(5):
                try:
                    os.replace(tmp, path)
                    return
                except PermissionError:  # Windows: a reader holds the target open
                    if attempt == 4:
                        raise
                    time.sleep(0.02)
        except OSError as exc:
            _unlink_quietly(tmp)
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

    # -- members' heartbeats ---------------------------------------------------
    def write_member(self, doc: dict[str, Any]) -> None:
        members = self.dir / MEMBERS_DIR
        try:
            members.mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create {members}: {exc.strerror}") from exc
        body = dict(doc, sig=sign(doc, self.token))
        self._replace(members / f"{doc['node']}.json", json.dumps(body).encode() + b"\n")

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
            epoch = doc.get("epoch")
            if isinstance(epoch, int) and not isinstance(epoch, bool):
                best = max(best, epoch)
        return best


def _lock_owner(content: bytes) -> tuple[str, int] | None:
    try:
        doc = json.loads(content)
        return str(doc["node"]), int(doc["pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
