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

The file backend serializes writers with `relay_leader.lock` (O_CREAT|O_EXCL),
whose content is signed with the pool key. A lock that is not validly signed is
broken at once (anyone who can write the share could otherwise hold the pool
forever); a signed lock left by a writer that died is broken once this process
has known that very content for `lock_stale_s` on its own monotonic clock —
counted from the first time it ever saw it, so old locks replayed in turn age
like one — and a lock of this node whose pid is no longer alive is broken at
once. No wall clocks of two machines are ever compared.

Nothing read from the share is trusted (DESIGN.md §5.4): every file is opened
as a regular file only, bounded in size and nesting (`sharefiles`,
`core.untrusted`), and must be signed; a member file must name its own node
and its heartbeat `seq` may only grow. Whatever fails is skipped, counted in
`refusals` and logged once per file and cause. Every public operation runs
under the share's deadline (`SHARE_TIMEOUT`): a hung share raises
`StoreUnavailable` instead of blocking the caller.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from elections.core.evidence import Refusals
from elections.core.lease import LeaseRead, LeaseRecord, parse_lease, revision_of, sign, signature_ok
from elections.core.untrusted import (
    FORGED,
    LEASE,
    LOCK,
    MEMBER,
    NOT_OBJECT,
    REPLAYED,
    UNSIGNED,
    WRONG_NODE,
    Limits,
    Untrusted,
    load_object,
)
from elections.errors import StoreUnavailable
from elections.ports.clock import Clock
from elections.ports.host import pid_alive, unlink_quietly, write_atomic
from elections.ports.sharefiles import DEFAULT_TIMEOUT, deadline_for, list_regular, read_regular

log = logging.getLogger("stkrelay.store")

LEASE_NAME = "relay_leader.json"
LOCK_NAME = "relay_leader.lock"
MEMBERS_DIR = "members"
MAX_MEMBERS = 64  # member files read per pool; more are refused (too_many)
FIRST_SEEN_KEPT = 256  # lock contents remembered with the time first seen
SECURITY_CAUSES = frozenset({UNSIGNED, FORGED, REPLAYED, WRONG_NODE})
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


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
        timeout: float = DEFAULT_TIMEOUT,
        refusals: Refusals | None = None,
    ) -> None:
        self.dir = Path(lease_dir)
        self.token = token  # the pool key: signs and verifies every record
        self.node = node
        self.clock = clock
        self.lock_stale_s = lock_stale_s
        self.lease_path = self.dir / LEASE_NAME
        self.lock_path = self.dir / LOCK_NAME
        self.deadline = deadline_for(self.dir, timeout)
        self.refusals = refusals if refusals is not None else Refusals()
        self._first_seen: OrderedDict[str, float] = OrderedDict()  # content digest -> first seen
        self._my_lock: bytes | None = None
        self._member_seq: dict[str, int] = {}  # node -> highest heartbeat seq accepted
        self._member_doc: dict[str, dict[str, Any]] = {}  # node -> that heartbeat

    def describe(self) -> str:
        return f"file:{self.dir}"

    def refuse(self, source: str, exc: Untrusted, log_it: bool = True) -> None:
        """Count and (once per source and cause) log something the share holds that is no evidence."""
        at = self.clock.wall().isoformat(timespec="seconds")
        if self.refusals.note(source, exc.cause, exc.detail, at, self.clock.monotonic()) and log_it:
            level = logging.ERROR if exc.cause in SECURITY_CAUSES else logging.WARNING
            prefix = "SECURITY: " if exc.cause in SECURITY_CAUSES else ""
            log.log(level, "%signoring %s in %s: %s (%s)", prefix, source, self.dir, exc.detail, exc.cause)

    # -- reading -------------------------------------------------------------
    def _read_raw(self, path: Path, limits: Limits) -> bytes | None:
        """The file's bytes, None if there is none; `Untrusted` for a link, a
        FIFO, a directory or an oversized file."""
        try:
            raw = read_regular(path, limits.max_bytes)
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc.strerror or exc}") from exc
        if raw is None and not self.dir.is_dir():
            raise StoreUnavailable(f"lease dir {self.dir} is gone")
        return raw

    def _read_lease(self) -> LeaseRead:
        try:
            raw = self._read_raw(self.lease_path, LEASE)
        except Untrusted as exc:
            return LeaseRead("corrupt", detail=exc.detail, revision=f"untrusted:{exc.cause}", cause=exc.cause)
        read = parse_lease(raw, self.token)
        if read.cause:  # counted here; the elector logs what it makes of the lease
            self.refuse(LEASE_NAME, Untrusted(read.cause, read.detail), log_it=False)
        return read

    def read(self) -> LeaseRead:
        return self.deadline.run(self._read_lease)

    def _lease_revision(self) -> str:
        try:
            return revision_of(self._read_raw(self.lease_path, LEASE))
        except Untrusted as exc:
            return f"untrusted:{exc.cause}"

    # -- the lock ------------------------------------------------------------
    def _try_lock(self, retry: bool = True) -> bool:
        doc = {"node": self.node, "pid": os.getpid(), "nonce": secrets.token_hex(8)}
        body = json.dumps({**doc, "sig": sign(doc, self.token)}).encode()
        try:
            fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW, 0o644)
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
            if self._read_raw(self.lock_path, LOCK) == mine:
                os.unlink(self.lock_path)
            else:
                log.warning("our lock on %s was broken by another process", self.dir)
        except (OSError, StoreUnavailable, Untrusted):
            pass

    def _aged(self, content: bytes) -> float:
        """Seconds since this process first saw `content` (any file, any time)."""
        digest = hashlib.sha256(content).hexdigest()
        now = self.clock.monotonic()
        first = self._first_seen.get(digest)
        if first is None:
            self._first_seen[digest] = now
            while len(self._first_seen) > FIRST_SEEN_KEPT:
                self._first_seen.popitem(last=False)
            return 0.0
        return now - first

    def _lock_content(self) -> tuple[bytes | None, tuple[str, int] | None, str]:
        """(content, owner if validly signed, why it is not)."""
        try:
            content = self._read_raw(self.lock_path, LOCK)
        except Untrusted as exc:
            self.refuse(LOCK_NAME, exc)
            return b"untrusted", None, exc.detail
        if content is None:
            return None, None, ""
        try:
            doc = load_object(content, LOCK, "lock file")
            if not signature_ok(doc, self.token):
                raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, "lock is not validly signed")
            return content, (str(doc["node"]), int(doc["pid"])), ""
        except Untrusted as exc:
            self.refuse(LOCK_NAME, exc)
            return content, None, exc.detail
        except (KeyError, TypeError, ValueError):
            self.refuse(LOCK_NAME, Untrusted(NOT_OBJECT, "lock has no node and pid"))
            return content, None, "lock has no node and pid"

    def _maybe_break_lock(self) -> bool:
        """Break the lock if it is stale or not validly signed. True if this call removed it.

        Breakers serialize on a marker file named after the lock's content, so
        that two breakers of one stale lock cannot remove a fresh lock taken in
        between. A marker left by a breaker that died ages out the same way."""
        try:
            content, owner, bad = self._lock_content()
        except StoreUnavailable:
            return False
        if content is None:
            return True  # gone already: worth one more try
        dead_here = owner is not None and owner[0] == self.node and not pid_alive(owner[1])
        age = self._aged(content)
        if owner is not None and not dead_here and age < self.lock_stale_s:
            return False
        marker = self.dir / f"{LOCK_NAME}.break-{revision_of(content)[:16]}"
        for _ in range(2):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW, 0o644))
                break
            except FileExistsError:
                if self._aged(b"marker:" + marker.name.encode()) < self.lock_stale_s:
                    return False  # someone else is breaking it right now
                unlink_quietly(marker)  # its breaker died
            except OSError:
                return False
        else:
            return False
        try:
            if self._lock_content()[0] != content:
                return False
            os.unlink(self.lock_path)
            if owner is None:
                why = f"not validly signed: {bad}"
            else:
                why = f"its pid {owner[1]} is dead" if dead_here else f"unchanged for {age:.1f} s"
            log.warning(
                "broke stale lock %s (%s): %s", self.lock_path, content[:200].decode(errors="replace"), why
            )
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

    def _write(self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None) -> WriteOutcome:
        if not self._try_lock():
            return WriteOutcome.BUSY
        try:
            if self._lease_revision() != expect:
                return WriteOutcome.CHANGED
            if fence is not None and not fence():
                return WriteOutcome.FENCED
            self._replace(self.lease_path, record.encode(self.token))
            return WriteOutcome.WRITTEN
        finally:
            self._unlock()

    def write(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome:
        return self.deadline.run(lambda: self._write(record, expect, fence))

    def _acquire(
        self, make: Callable[[int], LeaseRecord], expect: str, known_epoch: int, member: dict[str, Any]
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        if not self._try_lock():
            return WriteOutcome.BUSY, None
        try:
            if self._lease_revision() != expect:
                return WriteOutcome.CHANGED, None
            record = make(max(known_epoch, self._highest_epoch()) + 1)
            self._write_member(dict(member, epoch=record.epoch))  # the claim, before the lease
            self._replace(self.lease_path, record.encode(self.token))
            return WriteOutcome.WRITTEN, record
        finally:
            self._unlock()

    def acquire(
        self,
        make: Callable[[int], LeaseRecord],
        expect: str,
        known_epoch: int,
        member: dict[str, Any],
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        return self.deadline.run(lambda: self._acquire(make, expect, known_epoch, member))

    # -- members' heartbeats ---------------------------------------------------
    def _own_member(self, path: Path) -> dict[str, Any]:
        """This node's own last heartbeat, if validly signed (else {})."""
        try:
            doc = load_object(self._read_raw(path, MEMBER) or b"{}", MEMBER, path.name)
        except Untrusted:
            return {}
        return doc if signature_ok(doc, self.token) else {}

    def _write_member(self, doc: dict[str, Any]) -> None:
        members = self.dir / MEMBERS_DIR
        try:
            members.mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create {members}: {exc.strerror}") from exc
        path = members / f"{doc['node']}.json"
        mine = self._own_member(path)
        if _int(mine.get("epoch")) > _int(doc.get("epoch")):
            doc = dict(doc, epoch=_int(mine.get("epoch")))
        if _int(mine.get("seq")) >= _int(doc.get("seq")):
            doc = dict(doc, seq=_int(mine.get("seq")) + 1)  # the seq only grows, across restarts too
        body = dict(doc, sig=sign(doc, self.token))
        self._replace(path, json.dumps(body).encode() + b"\n")

    def write_member(self, doc: dict[str, Any]) -> None:
        """Write this member's heartbeat; never lowers its epoch or its seq."""
        self.deadline.run(lambda: self._write_member(doc))

    def _member(self, folder: Path, name: str) -> dict[str, Any] | None:
        node = name[: -len(".json")]
        try:
            doc = load_object(self._read_raw(folder / name, MEMBER) or b"", MEMBER, f"{MEMBERS_DIR}/{name}")
            if not signature_ok(doc, self.token):
                raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, f"{name} is not validly signed")
            if doc.get("node") != node:
                raise Untrusted(WRONG_NODE, f"{name} names node {str(doc.get('node'))[:64]!r}")
            seq = _int(doc.get("seq"))
            if seq < self._member_seq.get(node, 0):
                raise Untrusted(REPLAYED, f"{name}: heartbeat seq {seq} < {self._member_seq[node]} seen")
        except Untrusted as exc:
            self.refuse(f"{MEMBERS_DIR}/{name}", exc)
            return self._member_doc.get(node)  # the last good heartbeat: it ages as if silent
        self._member_seq[node], self._member_doc[node] = seq, doc
        return doc

    def _read_members(self) -> dict[str, dict[str, Any]]:
        folder = self.dir / MEMBERS_DIR
        try:
            names, refused = list_regular(folder, ".json", MAX_MEMBERS)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreUnavailable(f"cannot list {folder}: {exc.strerror}") from exc
        for exc in refused:
            self.refuse(f"{MEMBERS_DIR}/", exc)
        out = {}
        for name in names:
            doc = self._member(folder, name)
            if doc is not None:
                out[name[: -len(".json")]] = doc
        return out

    def read_members(self) -> dict[str, dict[str, Any]]:
        """Every member's last valid heartbeat, by node (bad files are refused)."""
        return self.deadline.run(self._read_members)

    def _highest_epoch(self) -> int:
        lease = self._read_lease()
        best = lease.record.epoch if lease.record is not None else 0
        for doc in self._read_members().values():
            best = max(best, _int(doc.get("epoch")))
        return best

    def highest_epoch(self) -> int:
        return self.deadline.run(self._highest_epoch)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
