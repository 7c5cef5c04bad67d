"""The `LeaseStore` port and its file backend (DESIGN.md §5.1).

Contract of every backend:
- `read()` returns a `LeaseRead` (valid / missing / corrupt / forged) and raises
  `StoreUnavailable` only when the store itself cannot be reached.
- `write(record, expect, fence)` is compare-and-set: it writes only if the store
  still holds exactly what was read with revision `expect`, and only if `fence()`
  still returns True at the last moment before the write. It returns a
  `WriteOutcome`; losing a race is a normal outcome, not an exception. A
  backend whose records are bound to a hold of the store (etcd's leases)
  answers `LOST` when that hold was taken away: the writer leads no more.
- `acquire(make, expect, known_epoch, member)` is the compare-and-set of an
  election: under the same exclusion as `write`, it picks the new epoch as one
  more than the highest the pool has recorded (lease, members' files, and
  `known_epoch`), records the claim in this member's file, then writes the
  lease. Claims are written before the lease and under the lock, so no two
  nodes can ever take the same epoch, even when the lease file is deleted.
- `write_member(doc)` never lowers the epoch recorded in this member's file.

The file backend serializes writers with `relay_leader.lock` (`filelock`:
O_CREAT|O_EXCL, content signed with the pool key, stale locks broken by a
bound on this process's own monotonic clock). An election's compare-and-set
reads the lease as the file server holds it, past any client cache: under the
lock the lease is renamed aside, read there, then replaced or put back
(`_fresh_revision`), so that a share serving old copies can neither hand a
follower a live lease nor two contenders one epoch. A renewal needs no such
read: a leader renews only within its deadline, and nobody may take its lease
before it has gone unrenewed — on the server — for a whole TTL, which is longer.

A plain renewal takes no lock either (issue 22: 3 share operations, not 7):
when the record it replaces is the one this store itself wrote last — same
node, same epoch, the revision it wrote, read at most `FRESH_READ_S` ago (else
read once more) — and it changes neither the holder nor the epoch nor the
release (`_renew_in_place`). Epochs are still only ever taken under the lock;
a release or a handoff still takes it; so does any write over something this
store did not write (a damaged file, another node's record). Why a claimer
under §5.1's lock protocol (of this version or an older one) stays safe: the
README, "Renewing without the lock (issue 22)".

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
import json
import logging
import os
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from elections.core.evidence import Refusals
from elections.core.lease import LeaseRead, LeaseRecord, parse_lease, revision_of, sign, signature_ok
from elections.core.skew import ClockReading, from_window
from elections.core.untrusted import (
    BAD_FIELD,
    FORGED,
    LEASE,
    MEMBER,
    NOT_A_FILE,
    REPLAYED,
    UNSIGNED,
    WRONG_NODE,
    Limits,
    Untrusted,
    check_member,
    load_object,
)
from elections.errors import StoreUnavailable
from elections.ports.clock import Clock
from elections.ports.filelock import ShareLock
from elections.ports.share import LocalShare, Share, share_of
from elections.ports.sharefiles import DEFAULT_TIMEOUT, NODE_FILE

log = logging.getLogger("stkrelay.store")

LEASE_NAME = "relay_leader.json"
LOCK_NAME = "relay_leader.lock"
MEMBERS_DIR = "members"
T = TypeVar("T")
MAX_MEMBERS = 64  # member files read per pool; more are refused (too_many)
SECURITY_CAUSES = frozenset({UNSIGNED, FORGED, REPLAYED, WRONG_NODE, BAD_FIELD})
# A renewal without the lock trusts a read of its own record at most this old (this process's
# monotonic clock, from the read's start to the write's); an older one is read again first.
FRESH_READ_S = 0.25


class WriteOutcome(enum.Enum):
    WRITTEN = "written"
    CHANGED = "changed"  # the store no longer holds what was read: lost the race
    BUSY = "busy"  # another writer holds the lock right now
    FENCED = "fenced"  # fence() said no at the last moment: nothing written
    LOST = "lost"  # the store took the writer's hold away (an etcd lease revoked or expired): step down


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

    def remove_member(self, node: str) -> bool:
        """Remove `node`'s member record (a retired member: `relayctl forget`); True if
        there was one. Its events stay. Also `forget_member(node)`."""
        ...

    def measure_clock(self) -> ClockReading | None:
        """This machine's wall clock against the store's (`core.skew`), or None."""
        ...

    def forget_member(self, node: str) -> None:
        """Drop what this store remembers of `node`'s heartbeats (its replay floor, its
        last good record): the pool forgot it, so a member of that name that comes back
        starts afresh."""
        ...

    def describe(self) -> str: ...


class FileLeaseStore:
    def __init__(
        self,
        lease_dir: str | os.PathLike[str] | Share,
        token: str,
        node: str,
        clock: Clock,
        lock_stale_s: float = 2.0,
        timeout: float = DEFAULT_TIMEOUT,
        refusals: Refusals | None = None,
    ) -> None:
        self.share = share_of(lease_dir, timeout)  # a path is a local (or mounted) directory
        self.dir = self.share.root if isinstance(self.share, LocalShare) else None
        self.token = token  # the pool key: signs and verifies every record
        self.node = node
        self.clock = clock
        self.lock_stale_s = lock_stale_s
        self.deadline = self.share.deadline
        self.refusals = refusals if refusals is not None else Refusals()
        self.lock = ShareLock(
            self.share, LOCK_NAME, token, node, clock, lock_stale_s, self._read_raw, self.refuse
        )
        self._member_seq: dict[str, int] = {}  # node -> highest heartbeat seq accepted
        self._member_doc: dict[str, dict[str, Any]] = {}  # node -> that heartbeat
        self._member_written: tuple[float, float] | None = None  # wall clock around our last heartbeat write
        # What this node last wrote to its own member file: (epoch, seq). Its next
        # heartbeat need not read the file back (one share operation of three);
        # it is read again after a write that failed, and after a restart.
        self._own_written: tuple[int, int] | None = None
        self.own_record: dict[str, Any] | None = None  # that record (without `sig`), for the beacons
        # The lease this store last wrote — (revision, node, epoch) — and its last read of the
        # lease — (revision, when the read began): a renewal over exactly that needs no lock.
        self._lease_mine: tuple[str, str, int] | None = None
        self._lease_seen: tuple[str, float] | None = None
        self.renewals_in_place = 0  # renewals written without the lock (for the tests and the bench)

    def describe(self) -> str:
        return f"file:{self.share.where}"

    def _run(self, fn: Callable[[], T]) -> T:
        """One public operation: on the share's deadline thread, and whatever the
        share answers (ENOSPC, EIO...) is `StoreUnavailable`, never a raw OSError."""

        def guarded() -> T:
            try:
                return fn()
            except OSError as exc:
                raise StoreUnavailable(f"share error in {self.share.where}: {exc.strerror or exc}") from exc

        return self.deadline.run(guarded)

    def refuse(self, source: str, exc: Untrusted, log_it: bool = True) -> None:
        """Count and (once per source and cause) log something the share holds that is no evidence."""
        at = self.clock.wall().isoformat(timespec="seconds")
        if self.refusals.note(source, exc.cause, exc.detail, at, self.clock.monotonic()) and log_it:
            level = logging.ERROR if exc.cause in SECURITY_CAUSES else logging.WARNING
            prefix = "SECURITY: " if exc.cause in SECURITY_CAUSES else ""
            where = self.share.where
            log.log(level, "%signoring %s in %s: %s (%s)", prefix, source, where, exc.detail, exc.cause)

    # -- reading -------------------------------------------------------------
    def _read_raw(self, rel: str, limits: Limits) -> bytes | None:
        """The file's bytes, None if there is none; `Untrusted` for a link, a
        FIFO, a directory or an oversized file."""
        try:
            raw = self.share.read(rel, limits.max_bytes)
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {rel} in {self.share.where}: {exc.strerror or exc}") from exc
        if raw is None and not self.share.exists():
            raise StoreUnavailable(f"lease dir {self.share.where} is gone")
        return raw

    def _read_lease(self) -> LeaseRead:
        try:
            raw = self._read_raw(LEASE_NAME, LEASE)
        except Untrusted as exc:
            self.refuse(LEASE_NAME, exc, log_it=False)  # counted like any other refused lease
            return LeaseRead("corrupt", detail=exc.detail, revision=f"untrusted:{exc.cause}", cause=exc.cause)
        read = parse_lease(raw, self.token)
        if read.cause:  # counted here; the elector logs what it makes of the lease
            self.refuse(LEASE_NAME, Untrusted(read.cause, read.detail), log_it=False)
        return read

    def read(self) -> LeaseRead:
        began = self.clock.monotonic()
        read = self._run(self._read_lease)
        self._lease_seen = (read.revision, began)
        return read

    def _lease_revision(self) -> str:
        try:
            return revision_of(self._read_raw(LEASE_NAME, LEASE))
        except Untrusted as exc:
            return f"untrusted:{exc.cause}"

    def _fresh_revision(self) -> tuple[str, str | None]:
        """The lease's revision as the file server holds it now, for an election's
        compare-and-set under the lock: (revision, where the lease was moved aside, or None).

        A client's cache (NFS attribute caching, a share that serves old copies)
        may show an older lease than the server holds; a compare-and-set on that
        copy would let a follower take a live lease, or two contenders the same
        epoch. So the lease is renamed aside first — a server-side operation
        every client sees at once, and a change of this client's own, which
        drops its copy — and read there. Only a regular file is moved; the
        caller puts it back (`_put_back`) or writes the new lease in its place
        (`_replaced_aside`). Every lease writer holds the lock, so nothing
        writes the lease in between.
        """
        aside = f".{LEASE_NAME}.{self.node}.cas"
        try:
            if self.share.planted(LEASE_NAME):
                return self._lease_revision(), None
            self.share.move(LEASE_NAME, aside)
        except FileNotFoundError:
            return revision_of(None), None
        except Untrusted as exc:  # the server hides something at the aside name: compare in place
            self.refuse(aside, exc)
            return self._lease_revision(), None
        except OSError as exc:
            raise StoreUnavailable(f"cannot move {LEASE_NAME} aside in {self.share.where}: "
                                   f"{exc.strerror or exc}") from exc  # fmt: skip
        try:
            return revision_of(self._read_raw(aside, LEASE)), aside
        except Untrusted as exc:
            return f"untrusted:{exc.cause}", aside
        except StoreUnavailable:
            self._put_back(aside)
            raise

    def _put_back(self, aside: str | None) -> None:
        if aside is not None:
            try:
                self.share.move(aside, LEASE_NAME)
            except OSError as exc:
                raise StoreUnavailable(f"cannot put {LEASE_NAME} back in {self.share.where}: "
                                       f"{exc.strerror or exc}") from exc  # fmt: skip

    def _replaced_aside(self, aside: str | None, data: bytes) -> None:
        """Write the new lease where the moved one was; the old copy goes (or back, if the write failed)."""
        try:
            self._replace(LEASE_NAME, data)
        except StoreUnavailable:
            self._put_back(aside)
            raise
        if aside is not None:
            try:
                self.share.unlink(aside)
            except OSError:
                pass  # a leftover copy under a dot name: no reader looks at it

    # -- writing -------------------------------------------------------------
    def _replace(self, rel: str, data: bytes) -> None:
        """Atomically, for readers on other machines. Something planted where the
        file belongs (a directory, a link's target we may not replace) is moved
        aside first, so it cannot stop this write for good."""
        for attempt in range(2):
            try:
                self.share.replace(rel, data, tag=self.node)
                return
            except OSError as exc:
                if attempt or not self.share.planted(rel):
                    where = f"{rel} in {self.share.where}"
                    raise StoreUnavailable(f"cannot write {where}: {exc.strerror or exc}") from exc
                self.refuse(rel, Untrusted(NOT_A_FILE, f"{rel.rsplit('/', 1)[-1]} was not a file"))
                self.share.quarantine(rel)
            except Untrusted as exc:  # something the share will not let us see or move is in its place
                self.refuse(rel, exc)
                raise StoreUnavailable(f"cannot write {rel} in {self.share.where}: {exc.detail}") from None

    def _write(self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None) -> WriteOutcome:
        if self._renews_own(record, expect):
            outcome = self._renew_in_place(record, expect, fence)
            if outcome is not None:
                return outcome
        if not self.lock.acquire():
            return WriteOutcome.BUSY
        try:
            if self._lease_revision() != expect:
                return WriteOutcome.CHANGED
            if fence is not None and not fence():
                return WriteOutcome.FENCED
            self._write_lease(record)
            return WriteOutcome.WRITTEN
        finally:
            self.lock.release()

    def _renews_own(self, record: LeaseRecord, expect: str) -> bool:
        """A plain renewal of the very record this store wrote last: same node, same
        epoch, still held (`ttl_s` > 0), no handoff."""
        mine = self._lease_mine
        return (
            mine == (expect, record.node, record.epoch)
            and record.ttl_s > 0
            and not record.released
            and record.handoff_to is None
        )

    def _renew_in_place(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None
    ) -> WriteOutcome | None:
        """The renewal without the lock: replace the lease (temp file + rename: the file
        never goes missing) if it still is our own last record, as read at most
        `FRESH_READ_S` before the rename. None: not so, take the lock as before."""
        seen = self._lease_seen
        if seen is None or seen[0] != expect or self.clock.monotonic() - seen[1] > FRESH_READ_S:
            began = self.clock.monotonic()
            if self._lease_revision() != expect:
                return None  # not (or no longer) our own record: the locked compare-and-set says what
            seen = self._lease_seen = (expect, began)
        if fence is not None and not fence():
            return WriteOutcome.FENCED
        if self.clock.monotonic() - seen[1] > FRESH_READ_S:
            return None  # the share was slow: compare under the lock instead
        self._write_lease(record)
        self.renewals_in_place += 1
        return WriteOutcome.WRITTEN

    def _write_lease(self, record: LeaseRecord, aside: str | None = None, acquiring: bool = False) -> None:
        """Write `record` as the lease (in place of the moved-aside copy when acquiring) and
        remember it as this store's own last write."""
        data = record.encode(self.token)
        self._lease_mine = None  # unknown until the write is done
        if acquiring:
            self._replaced_aside(aside, data)
        else:
            self._replace(LEASE_NAME, data)
        self._lease_mine = (revision_of(data), record.node, record.epoch)

    def write(
        self, record: LeaseRecord, expect: str, fence: Callable[[], bool] | None = None
    ) -> WriteOutcome:
        return self._run(lambda: self._write(record, expect, fence))

    def _acquire(
        self, make: Callable[[int], LeaseRecord], expect: str, known_epoch: int, member: dict[str, Any]
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        if not self.lock.acquire():
            return WriteOutcome.BUSY, None
        try:
            revision, aside = self._fresh_revision()
            if revision != expect:
                self._put_back(aside)
                return WriteOutcome.CHANGED, None
            try:
                current = self._read_lease() if aside is None else parse_lease(self._read_raw(aside, LEASE),
                                                                               self.token)  # fmt: skip
            except Untrusted:
                current = LeaseRead("corrupt")
            try:
                record = make(max(known_epoch, self._highest_epoch(current)) + 1)
                self._write_member(dict(member, epoch=record.epoch))  # the claim, before the lease
            except StoreUnavailable:
                self._put_back(aside)
                raise
            self._write_lease(record, aside, acquiring=True)
            return WriteOutcome.WRITTEN, record
        finally:
            self.lock.release()

    def acquire(
        self,
        make: Callable[[int], LeaseRecord],
        expect: str,
        known_epoch: int,
        member: dict[str, Any],
    ) -> tuple[WriteOutcome, LeaseRecord | None]:
        return self._run(lambda: self._acquire(make, expect, known_epoch, member))

    # -- members' heartbeats ---------------------------------------------------
    def _own_member(self, rel: str) -> dict[str, Any]:
        """This node's own last heartbeat, if validly signed (else {})."""
        try:
            doc = load_object(self._read_raw(rel, MEMBER) or b"{}", MEMBER, rel)
        except Untrusted as exc:  # planted in our own place (a link, a FIFO, junk): counted, replaced
            self.refuse(rel, exc)
            return {}
        return doc if signature_ok(doc, self.token) else {}

    def _write_member(self, doc: dict[str, Any]) -> None:
        try:
            planted = self.share.ensure_dir(MEMBERS_DIR)
        except OSError as exc:
            where = f"{MEMBERS_DIR}/ in {self.share.where}"
            raise StoreUnavailable(f"cannot create {where}: {exc.strerror or exc}") from exc
        if planted is not None:
            self.refuse(f"{MEMBERS_DIR}/", planted)
        path = f"{MEMBERS_DIR}/{doc['node']}.json"
        own = doc["node"] == self.node
        if own and self._own_written is not None:
            epoch, seq = self._own_written
        else:
            mine = self._own_member(path)
            epoch, seq = _int(mine.get("epoch")), _int(mine.get("seq"))
        if epoch > _int(doc.get("epoch")):
            doc = dict(doc, epoch=epoch)
        if seq >= _int(doc.get("seq")):
            doc = dict(doc, seq=seq + 1)  # the seq only grows, across restarts too
        body = dict(doc, sig=sign(doc, self.token))
        before = self.clock.wall().timestamp()
        if own:
            self._own_written = None  # unknown until this write is done
        self._replace(path, json.dumps(body).encode() + b"\n")
        if own:  # when, on this clock, the file server timed our write
            self._member_written = (before, self.clock.wall().timestamp())
            self._own_written = (_int(doc.get("epoch")), _int(doc.get("seq")))
            self.own_record = doc

    def write_member(self, doc: dict[str, Any]) -> None:
        """Write this member's heartbeat; never lowers its epoch or its seq."""
        self._run(lambda: self._write_member(doc))

    def _member(self, name: str) -> dict[str, Any] | None:
        node = name[: -len(".json")]
        try:
            rel = f"{MEMBERS_DIR}/{name}"
            raw = self._read_raw(rel, MEMBER)
            if raw is None:  # removed between the listing and this read (a forget): gone, not forged
                return None
            doc = load_object(raw, MEMBER, rel)
            if not signature_ok(doc, self.token):
                raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, f"{name} is not validly signed")
            if doc.get("node") != node:
                raise Untrusted(WRONG_NODE, f"{name} names node {str(doc.get('node'))[:64]!r}")
            check_member(doc, name)
            seq = _int(doc.get("seq"))
            if seq < self._member_seq.get(node, 0):
                raise Untrusted(REPLAYED, f"{name}: heartbeat seq {seq} < {self._member_seq[node]} seen")
        except Untrusted as exc:
            self.refuse(f"{MEMBERS_DIR}/{name}", exc)
            return self._member_doc.get(node)  # the last good heartbeat: it ages as if silent
        self._member_seq[node], self._member_doc[node] = seq, doc
        return doc

    def _read_members(self) -> dict[str, dict[str, Any]]:
        try:
            names, refused = self.share.listing(MEMBERS_DIR, ".json", MAX_MEMBERS)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            where = f"{MEMBERS_DIR}/ in {self.share.where}"
            raise StoreUnavailable(f"cannot list {where}: {exc.strerror or exc}") from exc
        for exc in refused:
            self.refuse(f"{MEMBERS_DIR}/", exc)
        out = {}
        for name in names:
            doc = self._member(name)
            if doc is not None:
                out[name[: -len(".json")]] = doc
        return out

    def read_members(self) -> dict[str, dict[str, Any]]:
        """Every member's last valid heartbeat, by node (bad files are refused)."""
        return self._run(self._read_members)

    def remove_member(self, node: str) -> bool:
        if not NODE_FILE.fullmatch(node):
            raise ValueError(f"{node[:64]!r} is not a node id")
        self.forget_member(node)

        def unlink() -> bool:
            try:
                self.share.unlink(f"{MEMBERS_DIR}/{node}.json")
            except FileNotFoundError:
                return False
            return True

        return self._run(unlink)

    def forget_member(self, node: str) -> None:
        self._member_seq.pop(node, None)
        self._member_doc.pop(node, None)

    def measure_clock(self) -> ClockReading | None:
        """This machine's wall clock against the file server's: the mtime the server gave
        this member's last heartbeat, against this clock before and after that write
        (one share operation). Shown only (`core.skew`)."""
        window = self._member_written
        if window is None:
            return None
        mtime = self._run(lambda: self.share.mtime(f"{MEMBERS_DIR}/{self.node}.json"))
        return None if mtime is None else from_window(*window, mtime, 0.0, "file server")

    def read_member(self, node: str) -> dict[str, Any] | None:
        """One member's last valid heartbeat (one read; a bad file is refused as in `read_members`)."""
        if not NODE_FILE.fullmatch(node):
            return None
        return self._run(lambda: self._member(f"{node}.json"))

    def member_names(self) -> set[str]:
        """The nodes with a member file (one listing, no file read)."""

        def names() -> set[str]:
            try:
                found, refused = self.share.listing(MEMBERS_DIR, ".json", MAX_MEMBERS)
            except FileNotFoundError:
                return set()
            except OSError as exc:
                raise StoreUnavailable(
                    f"cannot list {MEMBERS_DIR}/ in {self.share.where}: {exc.strerror or exc}"
                ) from exc
            for exc in refused:
                self.refuse(f"{MEMBERS_DIR}/", exc)
            return {name[: -len(".json")] for name in found}

        return self._run(names)

    def _highest_epoch(self, lease: LeaseRead | None = None) -> int:
        lease = lease if lease is not None else self._read_lease()
        best = lease.record.epoch if lease.record is not None else 0
        for doc in self._read_members().values():
            best = max(best, _int(doc.get("epoch")))
        return best

    def highest_epoch(self) -> int:
        return self._run(self._highest_epoch)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
