"""The SMB share's `wait_folder_change`: SMB2 CHANGE_NOTIFY where the server offers
it, polling where it does not (issue 22.3: a quiet pool reads the share only
when something may have changed).

One wait opens the folder (FILE_LIST_DIRECTORY, share access
read+write+delete: it never stands in the way of a rename in it) and asks the
server to answer when an entry of it is renamed, written or resized
(`CompletionFilter`); an answer naming one of the files waited for (or an
overflow, which names none: anything may have changed) ends the wait with
True, an answer about other files (the lock, a temp file) asks again. The
handle is closed when the wait ends.

Bounded, and never in the renewal's way:
- the whole exchange runs on a thread of its own, never on the share's
  deadline thread: the caller waits at most `timeout` (or until `stop`),
  whatever the server does; a CHANGE_NOTIFY still pending then is cancelled
  (SMB2 CANCEL) and its handle closed by that thread;
- while an earlier wait's thread is still stuck (a hung server), the next
  waits poll instead of stacking threads;
- a server that refuses CHANGE_NOTIFY (NOT_SUPPORTED, NOT_IMPLEMENTED,
  INVALID_DEVICE_REQUEST, ACCESS_DENIED...) is polled from then on: `refused`
  says so; any other failure (a lost connection) polls for the rest of that
  one wait, and the next wait tries again.

`notified`, `asked`, `polled` count what happened (tests, and what a bench prints).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from smbprotocol.change_notify import CompletionFilter, FileSystemWatcher
from smbprotocol.exceptions import SMBResponseException
from smbprotocol.header import NtStatus
from smbprotocol.open import CreateDisposition, Open
from smbprotocol.tree import TreeConnect

from elections.ports.share.share import SHARE_OPS
from elections.ports.share.smbterms import FOLDER, LIST
from elections.ports.store.backend import poll_wait

log = logging.getLogger("stkrelay.smb")

CHANGES = (
    CompletionFilter.FILE_NOTIFY_CHANGE_FILE_NAME
    | CompletionFilter.FILE_NOTIFY_CHANGE_LAST_WRITE
    | CompletionFilter.FILE_NOTIFY_CHANGE_SIZE
)
REFUSED = frozenset({
    NtStatus.STATUS_NOT_SUPPORTED,
    0xC0000002,  # STATUS_NOT_IMPLEMENTED (not in smbprotocol 1.17)
    NtStatus.STATUS_INVALID_DEVICE_REQUEST,
    NtStatus.STATUS_ACCESS_DENIED,
    NtStatus.STATUS_INVALID_PARAMETER,
})  # fmt: skip
ANSWER_BYTES = 4096  # the names of one batch of changes; past it the server says "overflow": anything changed
TICK = 0.05  # how often a waiting caller looks at `stop` (x 4)
CANCEL_WAIT = 1.0  # what a folder's notify thread waits for the server to answer a CANCEL
IDLE = 30.0  # a folder's notify with no waiter for this long is cancelled, its handle closed
RETRY_AFTER = 5.0  # after a failed notify (not a refusal), waits poll this long before one tries again


class NotifySession(Protocol):
    """What `FolderNotify` uses of its `SmbShare`: the connection, its opens and its counts."""

    where: str
    requests: int
    round_trips: int

    def _connect(self) -> TreeConnect: ...

    def _open(
        self, tree: TreeConnect, rel: str, access: int, disposition: int, options: int
    ) -> tuple[Open, Any]: ...

    def _send(self, tree: TreeConnect, messages: list[Any], related: bool = True) -> list[Any]: ...

    def _answers(self, requests: list[Any], unpack: list[Any]) -> list[Any]: ...

    def _raise_first(self, answers: list[Any]) -> None: ...

    def _close_quietly(self, tree: TreeConnect, fopen: Open) -> None: ...


class FolderNotify:
    """CHANGE_NOTIFY on the folders of one `SmbShare`, one notify thread per folder."""

    def __init__(self, session: NotifySession) -> None:
        self.session = session
        self.refused = False  # the server said it offers no CHANGE_NOTIFY: poll from now on
        self.notified = 0  # waits ended by the server's answer
        self.asked = 0  # CHANGE_NOTIFY requests sent
        self.polled = 0  # waits that polled instead
        self._notifies: dict[str, _FolderNotify] = {}
        self._lock = threading.Lock()

    def wait(self, rel: str, names: set[str] | None, timeout: float, stop: threading.Event | None) -> bool:
        """Until a file of `names` in `rel` (any, if None) may have changed (True), or `timeout`."""
        until = time.monotonic() + max(0.0, timeout)
        with self._lock:
            notify = self._notifies.get(rel)
            if notify is None or not notify.alive():
                notify = self._notifies[rel] = _FolderNotify(self, rel)
        if self.refused or not notify.start():
            self.polled += 1
            return poll_wait(timeout, stop)
        if notify.wait(names, until, stop):
            self.notified += 1
            return True
        if self.refused or notify.failed:  # it stopped answering: poll for the rest of this wait
            self.polled += 1
            return poll_wait(until - time.monotonic(), stop)
        return False


class _FolderNotify:
    """One folder's handle, and its CHANGE_NOTIFY asked again after every answer,
    on a thread of its own; it stops after `IDLE` seconds without a waiter."""

    def __init__(self, notify: FolderNotify, rel: str) -> None:
        self.notify = notify
        self.rel = rel
        self.failed = False  # the last attempt failed (a lost connection): waits poll until it works
        self._changed: list[set[str] | None] = []  # each answer: the names it gave (None: anything)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._last_waiter = time.monotonic()
        self._retry_at = 0.0

    def alive(self) -> bool:
        return self._thread is None or self._thread.is_alive()

    def start(self) -> bool:
        """The thread runs (started now if need be); False while a failure is cooling off."""
        with self._cond:
            self._last_waiter = time.monotonic()
            if self._thread is None:
                if time.monotonic() < self._retry_at:
                    return False
                self.failed = False
                self._thread = threading.Thread(target=self._run, name=f"smb-notify:{self.rel}", daemon=True)
                self._thread.start()
            return not self.failed

    def wait(self, names: set[str] | None, until: float, stop: threading.Event | None) -> bool:
        with self._cond:
            seen = len(self._changed)
            while True:
                for batch in self._changed[seen:]:
                    if batch is None or names is None or batch & names:
                        return True
                seen = len(self._changed)
                left = until - time.monotonic()
                if left <= 0 or (stop is not None and stop.is_set()) or self.failed or self.notify.refused:
                    return False
                self._last_waiter = time.monotonic()
                self._cond.wait(min(TICK * 4, left))

    def _tell(self, batch: set[str] | None) -> None:
        with self._cond:
            self._changed.append(batch)
            del self._changed[:-64]  # waiters look only at what came after they began
            self._cond.notify_all()

    def _run(self) -> None:
        session = self.notify.session
        try:
            tree = session._connect()
            fopen, (create, created) = session._open(
                tree, self.rel, LIST, CreateDisposition.FILE_OPEN, FOLDER
            )
            SHARE_OPS.count("open_notify", self.rel)
            session._raise_first(session._answers(session._send(tree, [create]), [created]))
            try:
                self._arm_until_idle(fopen)
            finally:
                session._close_quietly(tree, fopen)
        except SMBResponseException as exc:
            if exc.status in REFUSED:
                self.notify.refused = True
                log.info("%s offers no change notify (0x%08x): polling", session.where, exc.status)
            self._failed(exc)
        except Exception as exc:  # a lost connection, a server gone: waits poll, a later one tries again
            log.debug("change notify on %s ended: %s", session.where, exc)
            self._failed(exc)
        finally:
            with self._cond:
                self._thread = None
                self._cond.notify_all()

    def _failed(self, exc: BaseException) -> None:
        with self._cond:
            self.failed = True
            self._retry_at = time.monotonic() + RETRY_AFTER
            self._cond.notify_all()

    def _arm_until_idle(self, fopen: Any) -> None:
        while True:
            watcher = FileSystemWatcher(fopen)
            watcher.start(CHANGES, output_buffer_length=ANSWER_BYTES)
            SHARE_OPS.count("change_notify", self.rel)
            self.notify.asked += 1
            self.notify.session.requests += 1
            self.notify.session.round_trips += 1
            self.failed = False
            while not watcher.response_event.wait(TICK * 4):
                if time.monotonic() - self._last_waiter > IDLE:
                    watcher.cancel()
                    watcher.response_event.wait(CANCEL_WAIT)
                    return
            actions = watcher.result  # raises what the server answered instead
            if actions is None:
                return  # cancelled
            self._tell({str(a["file_name"].get_value()) for a in actions} if actions else None)
