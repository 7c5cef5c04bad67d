"""The share's acquisition lock, `relay_leader.lock` (docs/design.md §5.1, §5.4).

Published whole through the share (`Share.create_exclusive`: an exclusive
temp file, then `link()` or a rename that never replaces — SMB
`ReplaceIfExists = 0`); the one whose publish succeeds holds it. Its content —
node, pid, nonce — is signed with the pool key:

- a lock that is not a whole, validly signed object (empty, cut short, junk,
  forged, too large) is never a live writer's — no writer's lock is ever
  visible before it is whole — so it is broken at once: anyone who can write
  the share could otherwise hold elections off for as long as they keep
  rewriting it (docs/design.md §5.1, turn 3; it used to age like a live lock, when
  a lock was created empty and filled in a second step);
- a signed lock left by a writer that died is broken once this process has
  known that very content for `stale_s` on its own monotonic clock, counted
  from the first time it ever saw it, so old locks replayed in turn age like
  one; a lock of this node whose pid is no longer alive is broken at once.

Breakers serialize on a marker file named after the lock's content, so two
breakers of one stale lock cannot remove a fresh lock taken in between; a
marker left by a breaker that died ages out the same way; a lock found present
at every look for 5 x `stale_s`, whatever its content, is stale too (more old
locks rotated in than this process remembers) — looks at most `LOOK_GAP` x
`stale_s` apart: a gap restarts the count, for a lock seen once, long ago (a
race lost at the pool's start), says nothing about the one seen now (issue 22:
a follower broke a live claimer's fresh lock at its first look, while the
claimer had the lease moved aside, and two epochs were taken 0.1 s apart).
Whatever sits in the lock's
place and is not a file (a directory) is moved aside. No wall clocks of two
machines are ever compared.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable

from elections.core.lease import revision_of, sign, signature_ok
from elections.core.untrusted import FORGED, LOCK, NOT_OBJECT, UNSIGNED, Limits, Untrusted, load_object
from elections.errors import StoreUnavailable
from elections.ports.share.share import Share
from stkhost.clock import Clock
from stkhost.processes import pid_alive

log = logging.getLogger("stkrelay.store")

FIRST_SEEN_KEPT = 256  # lock contents remembered with the time first seen
PRESENCE_FACTOR = 5  # a lock seen at every look for 5 x stale_s is stale, whatever its content
LOOK_GAP = 2  # ... if those looks came at most 2 x stale_s apart (a contender looks every poll)


class ShareLock:
    def __init__(
        self, share: Share, name: str, key: str, node: str, clock: Clock, stale_s: float,
        read_raw: Callable[[str, Limits], bytes | None], refuse: Callable[[str, Untrusted], None],
    ) -> None:  # fmt: skip
        self.share = share
        self.name = name  # the lock's path in the share
        self.where = f"{name} in {share.where}"
        self.key = key
        self.node = node
        self.clock = clock
        self.stale_s = stale_s
        self.read_raw = read_raw  # the store's bounded, regular-files-only read
        self.refuse = refuse  # the store's count-and-log of what is no evidence
        self._first_seen: OrderedDict[str, float] = OrderedDict()  # content digest -> first seen
        self._my_lock: bytes | None = None
        self._present_since: float | None = None  # a lock of any content seen at every look since
        self._looked_at: float | None = None  # the last look that found a lock

    def acquire(self, retry: bool = True) -> bool:
        doc = {"node": self.node, "pid": os.getpid(), "nonce": secrets.token_hex(8)}
        body = json.dumps({**doc, "sig": sign(doc, self.key)}).encode()
        try:
            self.share.create_exclusive(self.name, body)  # a failed write leaves no empty lock behind
        except FileExistsError:
            # Broke a stale lock: race for it at once, like everyone else.
            return retry and self._maybe_break() and self.acquire(retry=False)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create {self.where}: {exc.strerror or exc}") from exc
        except Untrusted as exc:  # something the share will not let us see or move is in its place
            self.refuse(self.name, exc)
            raise StoreUnavailable(f"cannot create {self.where}: {exc.detail}") from None
        self._my_lock = body
        self._present_since = None
        return True

    def release(self) -> None:
        mine, self._my_lock = self._my_lock, None
        try:
            if self.read_raw(self.name, LOCK) == mine:
                self.share.unlink(self.name)
            else:
                log.warning("our lock %s was broken by another process", self.where)
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

    def _content(self) -> tuple[bytes | None, tuple[str, int] | None, str]:
        """(content, owner if validly signed, why it is not)."""
        try:
            content = self.read_raw(self.name, LOCK)
        except Untrusted as exc:
            self.refuse(self.name, exc)
            return b"untrusted", None, exc.detail
        if content is None:
            return None, None, ""
        try:
            doc = load_object(content, LOCK, "lock file")  # empty or junk: never a writer's (published whole)
            if not signature_ok(doc, self.key):
                raise Untrusted(UNSIGNED if "sig" not in doc else FORGED, "lock is not validly signed")
            return content, (str(doc["node"]), int(doc["pid"])), ""
        except Untrusted as exc:
            self.refuse(self.name, exc)
            return content, None, exc.detail
        except (KeyError, TypeError, ValueError):
            self.refuse(self.name, Untrusted(NOT_OBJECT, "lock has no node and pid"))
            return content, None, "lock has no node and pid"

    def _maybe_break(self) -> bool:
        """Break the lock if it is stale or not validly signed. True if this call removed it.

        Breakers serialize on a marker file named after the lock's content, so
        that two breakers of one stale lock cannot remove a fresh lock taken in
        between. A marker left by a breaker that died ages out the same way."""
        try:
            content, owner, bad = self._content()
        except StoreUnavailable:
            return False
        now = self.clock.monotonic()
        if content is None:
            self._present_since = None
            return True  # gone already: worth one more try
        gap = None if self._looked_at is None else now - self._looked_at
        if self._present_since is None or gap is None or gap > LOOK_GAP * self.stale_s:
            self._present_since = now  # a first look, or one after a gap: presence counts from here
        self._looked_at = now
        dead_here = owner is not None and owner[0] == self.node and not pid_alive(owner[1])
        # A content's own age, or — against old locks swapped in turn, more than
        # this process can remember — how long some lock has been there at every look.
        age = max(self._aged(content), (now - self._present_since) / PRESENCE_FACTOR)
        if owner is not None and not dead_here and age < self.stale_s:
            return False
        marker = f"{self.name}.break-{revision_of(content)[:16]}"
        for _ in range(2):
            try:
                self.share.create_exclusive(marker, b"")
                break
            except FileExistsError:
                if self._aged(b"marker:" + marker.rsplit("/", 1)[-1].encode()) < self.stale_s:
                    return False  # someone else is breaking it right now
                self._unlink_quietly(marker)  # its breaker died
            except OSError:
                return False
            except Untrusted as exc:  # something the share hides holds the marker's name
                self.refuse(marker, exc)
                return False
        else:
            return False
        try:
            if self._content()[0] != content:
                return False
            try:
                self.share.unlink(self.name)
            except (IsADirectoryError, PermissionError):  # a directory, or planted so it cannot be removed
                self.share.quarantine(self.name)
            self._present_since = None
            if owner is None:
                why = f"not validly signed: {bad}"
            else:
                why = f"its pid {owner[1]} is dead" if dead_here else f"unchanged for {age:.1f} s"
            log.warning(
                "broke stale lock %s (%s): %s", self.where, content[:200].decode(errors="replace"), why
            )
            return True
        except (OSError, StoreUnavailable):
            return False
        finally:
            self._unlink_quietly(marker)

    def _unlink_quietly(self, rel: str) -> None:
        try:
            self.share.unlink(rel)
        except OSError:
            pass
