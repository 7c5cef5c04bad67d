"""A watch on one pool's prefix, on a thread of its own: it says *when* to read,
never *what* is there (docs/design.md §5.2: watches instead of polling).

Every change under the prefix bumps a generation counter of its part (`lease`,
`members`, `events`); a reader remembers the generation it last read at and
reads etcd again only when it moved, when the watch is not connected, or when
its fallback timer ran out (a stream that stalls without an error must not
leave a reader on old data for long). What a reader acts on is always what a
linearizable read returned, never a value carried by the stream.

A delete of the lease key whose previous value was bound to an etcd lease is
reported to `on_lease_gone(lease_id)`: a holder whose lease was revoked (or
expired) behind its back learns it within one event, not at its next renewal.

The stream is an HTTP chunked answer of the gateway; it is read with a read
timeout, so a member that stops answering (paused, partitioned) is left for the
next one after `idle` seconds at most. Lines are bounded: a line longer than
`MAX_LINE` drops the connection (and the next one starts after it).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from elections.ports.etcd.client import EtcdClient, b64, gateway_int, prefix_end, unb64

log = logging.getLogger("stkrelay.etcd")

MAX_LINE = 8 << 20  # bytes of one watch answer (etcd bounds one value at ~1.5 MiB)
PARTS = ("lease", "members", "events")


class PrefixWatch:
    def __init__(
        self, client: EtcdClient, prefix: str, part_of: Callable[[str], str | None],
        lease_key: str, idle: float = 5.0,
    ) -> None:  # fmt: skip
        self.client = client
        self.prefix = prefix
        self.part_of = part_of
        self.lease_key = lease_key
        self.idle = idle
        self.generation = dict.fromkeys(PARTS, 0)
        self.connected = False
        self.revision = 0  # the last revision this watch has seen everything up to
        self.reconnects = 0
        self._listeners: list[Callable[[int], None]] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> PrefixWatch:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"etcd-watch{self.prefix}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def on_lease_gone(self, fn: Callable[[int], None]) -> None:
        self._listeners.append(fn)

    def wait_change(self, part: str, since: int, timeout: float) -> bool:
        """Block until `part`'s generation passes `since` (True) or `timeout` runs out."""
        with self._changed:
            return self._changed.wait_for(lambda: self.generation[part] != since, timeout)

    def _bump(self, parts: set[str]) -> None:
        with self._changed:
            for part in parts:
                self.generation[part] += 1
            self._changed.notify_all()

    # -- the thread ------------------------------------------------------------------
    def _loop(self) -> None:
        member = 0
        while not self._stop.is_set():
            try:
                self._stream(member)
            except Exception as exc:  # any trouble: this connection is done, the next one starts
                log.debug("etcd watch on %s ended: %s", self.client.endpoints[member], exc)
            was = self.connected
            self.connected = False
            if was:
                self._bump(set(PARTS))  # what happened while reconnecting is read, not assumed
            self.reconnects += 1
            member = (member + 1) % len(self.client.endpoints)
            self._stop.wait(0.05 if was else 0.2)

    def _stream(self, i: int) -> None:
        create: dict[str, Any] = {"key": b64(self.prefix), "range_end": b64(prefix_end(self.prefix)),
                                  "prev_kv": True, "progress_notify": True}  # fmt: skip
        if self.revision:
            create["start_revision"] = self.revision + 1
        resp = self.client.session(i).post(
            self.client.url_of(i, "watch"), data=json.dumps({"create_request": create}),
            timeout=(1.0, self.idle), stream=True,
        )  # fmt: skip
        try:
            if resp.status_code != 200:
                raise ConnectionError(f"HTTP {resp.status_code}")
            buf = b""
            for chunk in resp.iter_content(chunk_size=None):
                if self._stop.is_set():
                    return
                buf += chunk
                if len(buf) > MAX_LINE:
                    raise ConnectionError("watch answer too long")
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self._answer(json.loads(line))
        finally:
            resp.close()

    def _answer(self, doc: dict[str, Any]) -> None:
        result = doc.get("result")
        if not isinstance(result, dict):
            raise ConnectionError(f"watch failed: {str(doc.get('error'))[:200]}")
        header = result.get("header") or {}
        if result.get("canceled") or gateway_int(result.get("compact_revision")):
            self.revision = 0  # compacted past us: start again from now (readers re-read)
            raise ConnectionError(f"watch canceled: {str(result.get('cancel_reason'))[:200]}")
        if result.get("created"):
            if not self.revision:
                self.revision = gateway_int(header.get("revision"))
            self.connected = True
            self._bump(set(PARTS))  # anything may have changed before this stream began
            return
        touched: set[str] = set()
        gone: list[int] = []
        for event in result.get("events") or []:
            kv = event.get("kv") or {}
            key = unb64(kv.get("key")).decode("utf-8", "replace")
            part = self.part_of(key)
            if part is not None:
                touched.add(part)
            if key == self.lease_key and event.get("type") == "DELETE":
                lease = gateway_int((event.get("prev_kv") or {}).get("lease"))
                if lease:
                    gone.append(lease)
            self.revision = max(self.revision, gateway_int(kv.get("mod_revision")))
        self.revision = max(self.revision, gateway_int(header.get("revision")))
        if touched:
            self._bump(touched)
        for lease in gone:
            for fn in self._listeners:
                fn(lease)
