"""`ShareBackend`: the backend port on a folder of a file server (docs/design.md
§5.1, §5.3), local or mounted (`share.LocalShare`) or over SMB without a mount
(`smbshare.SmbShare`): the same files through one `Share`.

    lease             relay_leader.json
    members/<node>    members/<node>.json

A revision is the digest of the file's bytes (`revision_of`). The lease's
writers are serialized with `relay_leader.lock` (`filelock.ShareLock`:
published whole, signed with the pool key, a stale lock broken on this
process's own monotonic clock). A member's file has one writer, its node, and
is not locked: its compare-and-set compares with what this client last read
or wrote of it, and reads the file again only for any other revision.

An election (`claim`) reads the lease as the file server holds it, past any
client cache: under the lock the lease is renamed aside, read there, then
replaced or put back (`_fresh`), so that a share serving old copies can
neither hand a follower a live lease nor two contenders one epoch. A renewal
needs no such read: a leader renews only within its deadline, and nobody may
take its lease before it has gone unrenewed — on the server — for a whole TTL.

Only regular files are opened, every read is bounded (`sharefiles`); something
planted where a record belongs is moved aside and refused. Every operation of
the record layer runs on the share's deadline (`SHARE_TIMEOUT`): a hung share
raises `StoreUnavailable`, and whatever the share answers (ENOSPC, EIO...) is
`StoreUnavailable`, never a raw OSError.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from elections.core.lease import revision_of
from elections.core.retention import Retention
from elections.core.skew import ClockReading, from_window
from elections.core.untrusted import LEASE, MEMBER, NOT_A_FILE, Limits, Untrusted
from elections.core.witness import WITNESS
from elections.errors import StoreUnavailable
from elections.ports.events.share_events import ShareEvents, events_of
from elections.ports.share.filelock import ShareLock
from elections.ports.share.share import Share, share_of
from elections.ports.share.sharefiles import DEFAULT_TIMEOUT
from elections.ports.store.backend import (
    LEASE_KEY,
    MEMBERS,
    WITNESS_KEY,
    Build,
    Claimed,
    Got,
    Listing,
    Refuse,
    WriteOutcome,
    log_only,
    plain_details,
)
from stkhost.clock import Clock

T = TypeVar("T")

LEASE_NAME = "relay_leader.json"
LOCK_NAME = "relay_leader.lock"
WITNESS_NAME = "relay_witness.json"  # the share's witness (issue 38), beside the lease
MEMBERS_DIR = "members"
# A renewal without the lock trusts a read of the lease at most this old (this process's
# monotonic clock, from the read's start to the write's); an older one is read again first.
FRESH_READ_S = 0.25


def file_of(key: str) -> str:
    """The file a record key is kept in."""
    if key == LEASE_KEY:
        return LEASE_NAME
    if key == WITNESS_KEY:
        return WITNESS_NAME
    if key == MEMBERS:
        return f"{MEMBERS_DIR}/"
    if key.startswith(MEMBERS):
        return f"{MEMBERS_DIR}/{key[len(MEMBERS) :]}.json"
    raise KeyError(f"no file for record {key!r}")


class ShareBackend:
    counter_key = None  # epochs are found in the lease and the members' files
    reads_one_by_one = True
    record_end = b"\n"

    def __init__(
        self, where: str | os.PathLike[str] | Share, pool_key: str, node: str, clock: Clock,
        lock_stale_s: float = 2.0, timeout: float = DEFAULT_TIMEOUT, refuse: Refuse = log_only,
    ) -> None:  # fmt: skip
        self.share = share_of(where, timeout)  # a path is a local (or mounted) directory
        self.pool_key = pool_key
        self.where = self.share.where
        self.node = node
        self.deadline = self.share.deadline
        self.refuse = refuse  # the record layer's count-and-log (`backend.counted`)
        self.lock = ShareLock(self.share, LOCK_NAME, pool_key, node, clock, lock_stale_s, self._read_raw,
                              refuse)  # fmt: skip
        self._known: dict[str, str] = {}  # member file -> the revision this client last read or wrote
        self.clock = clock
        self._lease_seen: tuple[str, float] | None = None  # the last lease read: (revision, when it began)
        self.renewals_in_place = 0  # renewals written without the lock (for the tests and the bench)

    def describe(self) -> str:
        return f"file:{self.share.where}"

    def details(self) -> dict[str, Any]:
        return plain_details(self.describe())

    def source(self, key: str) -> str:
        return file_of(key)

    def run(self, fn: Callable[[], T]) -> T:
        def guarded() -> T:
            try:
                return fn()
            except OSError as exc:
                raise StoreUnavailable(f"share error in {self.share.where}: {exc.strerror or exc}") from exc

        return self.deadline.run(guarded)

    def event_streams(self, retention: Retention | None = None) -> ShareEvents:
        """`events/<node>.jsonl` and its segments (`share_events`), with the pool's retention."""
        return events_of(self.share, self.pool_key, self.clock, retention or Retention())

    def wait_change(self, key: str, timeout: float, stop: threading.Event | None = None) -> bool:
        rel = file_of(key)  # SMB2 CHANGE_NOTIFY on its folder, where the server offers it
        folder, _, name = rel.rpartition("/")
        return self.share.wait_folder_change(folder, timeout, stop, names={name} if name else None)

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

    def _got(self, rel: str, max_bytes: int) -> Got:
        try:
            raw = self._read_raw(rel, Limits(max_bytes))
        except Untrusted as exc:
            return Got(None, f"untrusted:{exc.cause}", refused=exc)
        return Got(raw, revision_of(raw))

    def get(self, key: str, max_bytes: int, fresh: bool = False) -> Got:
        began = self.clock.monotonic()
        got = self._got(file_of(key), max_bytes)
        if key != LEASE_KEY:
            self._known[key] = got.revision
        else:
            self._lease_seen = (got.revision, began)
        return got

    def names(self, prefix: str, limit: int) -> set[str]:
        return set(self._listing(prefix, limit))

    def _listing(self, prefix: str, limit: int) -> dict[str, int]:
        try:
            found, refused = self.share.listing(MEMBERS_DIR, ".json", limit)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreUnavailable(
                f"cannot list {MEMBERS_DIR}/ in {self.share.where}: {exc.strerror or exc}"
            ) from exc
        for odd in refused:
            self.refuse(f"{MEMBERS_DIR}/", odd)
        return {name[: -len(".json")]: size for name, size in found.items()}

    def list(self, prefix: str, limit: int, max_bytes: int, fresh: bool = False) -> Listing:
        out = Listing()
        for node in self._listing(prefix, limit):
            out.found[node] = self.get(prefix + node, max_bytes)
        return out

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

    def _lease_revision(self) -> str:
        return self._got(LEASE_NAME, LEASE.max_bytes).revision

    def cas(
        self, key: str, data: bytes, expected: str | None, fence: Callable[[], bool] | None = None,
        hold_s: float | None = None, renewal: bool = False,
    ) -> tuple[WriteOutcome, str]:  # fmt: skip
        if key == WITNESS_KEY:
            return self._witness_cas(data, expected), revision_of(data)
        if key != LEASE_KEY:
            return self._write_member(key, data, expected), revision_of(data)
        if renewal:
            outcome = self._renew_in_place(data, expected, fence)
            if outcome is not None:
                return outcome, revision_of(data)
        if not self.lock.acquire():
            return WriteOutcome.BUSY, ""
        try:
            if self._lease_revision() != expected:
                return WriteOutcome.CHANGED, ""
            if fence is not None and not fence():
                return WriteOutcome.FENCED, ""
            self._replace(LEASE_NAME, data)
            return WriteOutcome.WRITTEN, revision_of(data)
        finally:
            self.lock.release()

    def _renew_in_place(
        self, data: bytes, expected: str | None, fence: Callable[[], bool] | None
    ) -> WriteOutcome | None:
        """A renewal of the lease this store wrote last (the record layer says so), without the
        lock (issue 22: 3 share operations, not 7): replace the lease (temp file + rename: it
        never goes missing) if it still is that record, as read at most `FRESH_READ_S` before
        the rename. None: not so, the locked compare-and-set decides. Why a claimer under
        docs/design.md §5.1 stays safe: docs/election.md, "Renewing without the lock"."""
        seen = self._lease_seen
        if seen is None or seen[0] != expected or self.clock.monotonic() - seen[1] > FRESH_READ_S:
            began = self.clock.monotonic()
            if self._lease_revision() != expected:
                return None  # not (or no longer) our own record
            seen = self._lease_seen = (expected, began)
        if fence is not None and not fence():
            return WriteOutcome.FENCED
        if self.clock.monotonic() - seen[1] > FRESH_READ_S:
            return None  # the share was slow: compare under the lock instead
        self._replace(LEASE_NAME, data)
        self.renewals_in_place += 1
        return WriteOutcome.WRITTEN

    def _witness_cas(self, data: bytes, expected: str | None) -> WriteOutcome:
        """The witness record's compare-and-set (issue 38, W1, W2, W4): under the writers' lock,
        on the bytes as the file server holds them now, the record written whole (temp file and
        rename). Never blind: a refresh that overwrote a claim would let two leaders count it."""
        if not self.lock.acquire():
            return WriteOutcome.BUSY
        try:
            if self._got(WITNESS_NAME, WITNESS.max_bytes).revision != expected:
                return WriteOutcome.CHANGED
            self._replace(WITNESS_NAME, data)
            return WriteOutcome.WRITTEN
        finally:
            self.lock.release()

    def _write_member(self, key: str, data: bytes, expected: str | None) -> WriteOutcome:
        known = expected is None or self._known.get(key) == expected
        if not known and self._got(file_of(key), MEMBER.max_bytes).revision != expected:
            self._known.pop(key, None)
            return WriteOutcome.CHANGED
        try:
            planted = self.share.ensure_dir(MEMBERS_DIR)
        except OSError as exc:
            where = f"{MEMBERS_DIR}/ in {self.share.where}"
            raise StoreUnavailable(f"cannot create {where}: {exc.strerror or exc}") from exc
        if planted is not None:
            self.refuse(f"{MEMBERS_DIR}/", planted)
        self._known.pop(key, None)  # unknown until this write is done
        self._replace(file_of(key), data)
        self._known[key] = revision_of(data)
        return WriteOutcome.WRITTEN

    def delete(self, key: str) -> bool:
        self._known.pop(key, None)
        try:
            self.share.unlink(file_of(key))
        except FileNotFoundError:
            return False
        return True

    # -- an election -------------------------------------------------------------
    def claim(self, expect: str, build: Build) -> Claimed:
        if not self.lock.acquire():
            return Claimed(WriteOutcome.BUSY)
        try:
            lease, aside = self._fresh()
            if lease.revision != expect:
                self._put_back(aside)
                return Claimed(WriteOutcome.CHANGED)
            revisions: dict[str, str] = {}
            try:
                writes = list(build(lease) or ())
                for write in writes[:-1]:  # the claims, before the lease
                    outcome = self._write_member(write.key, write.data, write.expected)
                    if outcome is not WriteOutcome.WRITTEN:
                        self._put_back(aside)
                        return Claimed(outcome)
                    revisions[write.key] = revision_of(write.data)
            except StoreUnavailable:
                self._put_back(aside)
                raise
            if not writes:
                self._put_back(aside)
                return Claimed(WriteOutcome.CHANGED)
            self._replaced_aside(aside, writes[-1].data)
            revisions[LEASE_KEY] = revision_of(writes[-1].data)
            return Claimed(WriteOutcome.WRITTEN, revisions)
        finally:
            self.lock.release()

    def _fresh(self) -> tuple[Got, str | None]:
        """The lease as the file server holds it now, for an election's
        compare-and-set under the lock: (the lease, where it was moved aside, or None).

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
                return self._got(LEASE_NAME, LEASE.max_bytes), None
            self.share.move(LEASE_NAME, aside)
        except FileNotFoundError:
            return Got(None, revision_of(None)), None
        except Untrusted as exc:  # the server hides something at the aside name: compare in place
            self.refuse(aside, exc)
            return self._got(LEASE_NAME, LEASE.max_bytes), None
        except OSError as exc:
            raise StoreUnavailable(f"cannot move {LEASE_NAME} aside in {self.share.where}: "
                                   f"{exc.strerror or exc}") from exc  # fmt: skip
        try:
            return self._got(aside, LEASE.max_bytes), aside
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

    # -- the file server's clock -------------------------------------------------------
    def measure_clock(self, key: str, window: tuple[float, float] | None) -> ClockReading | None:
        """The mtime the server gave this member's last heartbeat, against this clock
        before and after that write (one share operation)."""
        if window is None:
            return None
        mtime = self.share.mtime(file_of(key))
        return None if mtime is None else from_window(*window, mtime, 0.0, "file server")
