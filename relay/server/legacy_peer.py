"""Old stations on the built-in relay: the transport half (`relay.wire.legacy` is the core).

While ``RELAY_LEGACY = 1`` both listeners use these peers instead of
`relay.server.connections.JsonPeer` / `PassthroughPeer`. The difference is the clock
around the hello: it is held for ``RELAY_LEGACY_WAIT`` seconds and sent only
if the client has said nothing by then (a client that speaks first is an old
station and is never greeted). Everything after is the v1 peer's, limits
included (``handshake_limit`` before registration, ``max_frame`` after,
the register timeout, silence).

Counting (in the server's `relay.wire.legacy.LegacyDesk`, shown in relay.json,
the panel and ``relayctl doctor``): legacy registrations, live legacy
sessions (``describe()["legacy"]``), and refusals of old-looking clients by
code, including a frame cut short by the client closing (``truncated``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from relay.server.connections import JsonPeer, PassthroughPeer
from relay.wire.events import Registered
from relay.wire.framing import FRAME_TOO_LARGE, ProtocolError
from relay.wire.legacy import LegacyDesk, LegacyServerConnection

TRUNCATED = "truncated"


class LegacyJsonPeer(JsonPeer):
    legacy = False  # registered with the legacy magic
    counted = False  # its refusal is counted (once per connection)
    greet_timer: asyncio.TimerHandle | None = None  # the held hello's deadline

    def greet(self, transport: asyncio.Transport, hello: bytes) -> None:
        # The core held the hello (`hello` is empty); send it once the wait is over.
        wait = self.desk.settings.wait
        if wait <= 0:
            self._say_hello()
        else:
            self.greet_timer = self.loop.call_later(wait, self._say_hello)

    @property
    def desk(self) -> LegacyDesk:
        desk = self.host.legacy
        assert desk is not None, "legacy peers need a server with RELAY_LEGACY on"
        return desk

    def _say_hello(self) -> None:
        self.greet_timer = None
        conn = self.conn
        if self.dead or self.registered or not isinstance(conn, LegacyServerConnection):
            return
        conn.greet()
        self._flush_conn()

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if not self.registered and isinstance(conn, LegacyServerConnection) and not conn.greeted:
            conn.heard()
            self._cancel_greeting()
        super().data_received(data)

    def _feed(self, data: bytes) -> None:
        over = not self.registered and self.rx + len(data) > self.host.handshake_limit
        super()._feed(data)
        conn = self.conn
        if over and isinstance(conn, LegacyServerConnection) and conn.closed and self._old_looking(conn):
            limit = self.host.handshake_limit  # the v1 peer closed it over this limit, with no event
            self._refused(FRAME_TOO_LARGE, f"handshake larger than {limit} bytes")

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_greeting()
        conn = self.conn
        if (
            isinstance(conn, LegacyServerConnection) and not conn.closed and self._old_looking(conn)
            and conn.partial
        ):  # fmt: skip
            self._refused(TRUNCATED, "closed in the middle of a frame")
        super().connection_lost(exc)

    def _cancel_greeting(self) -> None:
        if self.greet_timer is not None:
            self.greet_timer.cancel()
            self.greet_timer = None

    def _on_registered(self, event: Registered) -> None:
        conn = self.conn
        if isinstance(conn, LegacyServerConnection) and conn.legacy:
            self.legacy = True
            self.desk.registered += 1
        super()._on_registered(event)

    def _on_protocol_error(self, event: ProtocolError) -> None:
        super()._on_protocol_error(event)
        conn = self.conn
        if event.fatal and isinstance(conn, LegacyServerConnection) and self._old_looking(conn):
            self._refused(event.code, event.message)

    def _handshake_expired(self) -> None:
        conn = self.conn
        if not self.dead and isinstance(conn, LegacyServerConnection) and self._old_looking(conn):
            self._refused("timeout", "no complete register in time")
        super()._handshake_expired()

    def _old_looking(self, conn: LegacyServerConnection) -> bool:
        """Not registered, and it carried the legacy magic or spoke before the hello."""
        return not self.registered and (conn.legacy or conn.spoke_first)

    def _refused(self, code: str, message: str) -> None:
        if self.counted:
            return
        self.counted = True
        n = self.desk.refusal(code)  # a flood of bad stations must not flood the log:
        self.host.refused(f"legacy {code}", "refused a legacy client %s: %s %s (%d legacy refusals so far)",
                          self.peer, code, message[:200], n, level=logging.WARNING)  # fmt: skip

    def describe(self) -> dict[str, Any]:
        doc = super().describe()
        doc["legacy"] = self.legacy
        return doc


class LegacyPassthroughPeer(LegacyJsonPeer, PassthroughPeer):
    """The passthrough port's peer with the same held hello (raw bytes after ``registered``)."""


def legacy_kind(kind: type[JsonPeer]) -> type[JsonPeer]:
    """The legacy peer class standing for `kind` on its listener."""
    return LegacyPassthroughPeer if issubclass(kind, PassthroughPeer) else LegacyJsonPeer
