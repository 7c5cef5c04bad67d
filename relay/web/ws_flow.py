"""How much the web server holds for one WebSocket, and the bound on it (docs/design.md §8).

A bridge (`relay.web.ws`) reads the relay as fast as the relay writes, so a reader
that cannot keep up (a slow browser, a stopped tab, a hostile client that never
reads) must not make anything wait — neither the relay nor other clients — and
must not make the web process hold its messages without end. Daphne never makes
`send()` wait: what the peer does not read piles up in the connection's Twisted
transport. So:

- `WriteBuffer` (installed by `stkrelay.asgi` around the WebSocket routes, as
  ``scope["stk.write_buffer"]``) reads how many bytes the server holds unsent for
  this connection, and `receive`'s backlog (messages the client sent that the
  bridge has not taken yet), when the server is Daphne; under another server both
  read 0 and only the relay's own limits apply.
- `SendBound` is one connection's rule: a message may be sent while at most
  `max_bytes` are held and fewer than `max_messages` messages (the newest ones
  whose sizes cover the bytes held); else the reader is too slow, and the bridge closes
  it (`SLOW`), logs one line and counts it in `DROPS` (`/metrics`:
  ``stkrelay_websocket_drops_total{route,cause}``). The same bound holds for what
  the client sends while the relay is slow to take it.

Reads Daphne's private state (the transport of the protocol behind its `send`
partial): if a Daphne upgrade changes it, `WriteBuffer` finds nothing and reads 0.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("stkrelay.ws")

SCOPE_KEY = "stk.write_buffer"
SLOW = 4408  # close code: the peer reads (or the relay takes) too slowly
BUFFER_BYTES = "buffer_bytes"
BUFFER_MESSAGES = "buffer_messages"
INBOUND_BACKLOG = "inbound_backlog"


class Drops:
    """Connections closed as too slow, per (route, cause), in this web process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def count(self, route: str, cause: str) -> None:
        with self._lock:
            self._counts[(route, cause)] = self._counts.get((route, cause), 0) + 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


DROPS = Drops()


def _transport_bytes(transport: Any) -> int:
    """Bytes a Twisted `FileDescriptor` holds unsent (0 for anything else)."""
    try:
        return max(0, len(transport.dataBuffer) - transport.offset + transport._tempDataLen)
    except (AttributeError, TypeError):
        return 0


@dataclass
class Backlog:
    """What the server holds for one connection: outbound bytes, inbound messages."""

    outbound: Callable[[], int]
    inbound: Callable[[], int]


def backlog_of(send: Any, receive: Any) -> Backlog:
    """A `Backlog` reading Daphne's state behind `send` and `receive` (zeros elsewhere)."""
    protocol = send.args[0] if isinstance(send, functools.partial) and send.args else None
    queue = getattr(receive, "__self__", None)

    def outbound() -> int:
        return _transport_bytes(getattr(protocol, "transport", None))

    def inbound() -> int:
        try:
            return int(queue.qsize())  # type: ignore[union-attr]
        except (AttributeError, TypeError, ValueError):
            return 0

    return Backlog(outbound, inbound)


class WriteBuffer:
    """ASGI middleware: puts this connection's `Backlog` in the scope (outermost, before
    any middleware wraps `send` or `receive`)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope.get("type") == "websocket":
            scope = dict(scope, **{SCOPE_KEY: backlog_of(send, receive)})
        return await self.application(scope, receive, send)


class SendBound:
    """One connection's bound on what the server holds for it (see the module docstring).

    Messages held are counted from the bytes held: the newest messages sent whose sizes
    add up to what the transport still holds (each with its frame header)."""

    FRAME_HEADER = 10  # bytes a WebSocket frame adds at most (server frames are not masked)

    def __init__(self, backlog: Backlog | None, max_bytes: int, max_messages: int) -> None:
        self.backlog = backlog
        self.max_bytes = max_bytes
        self.max_messages = max_messages
        self._sizes: collections.deque[int] = collections.deque()  # the messages maybe still held
        self._total = 0

    @property
    def held_messages(self) -> int:
        return len(self._sizes)

    def before_send(self, size: int) -> str | None:
        """None when one more message of `size` bytes may go out; else why the reader is too slow."""
        if self.backlog is None:
            return None
        held = self.backlog.outbound()
        while self._sizes and self._total - self._sizes[0] >= held:
            self._total -= self._sizes.popleft()  # written out: older than every byte still held
        if held > self.max_bytes:
            return BUFFER_BYTES
        if len(self._sizes) >= self.max_messages:
            return BUFFER_MESSAGES
        self._sizes.append(size + self.FRAME_HEADER)
        self._total += size + self.FRAME_HEADER
        return None

    def inbound_full(self) -> bool:
        """The client sent more messages than the bound that the bridge has not taken yet."""
        return self.backlog is not None and self.backlog.inbound() >= self.max_messages


def note_slow(route: str, cause: str, client: Any, bound: SendBound) -> None:
    """One log line and one count for a connection closed as too slow."""
    DROPS.count(route, cause)
    held = bound.backlog.outbound() if bound.backlog is not None else 0
    log.warning(
        "websocket %s from %s closed, too slow: %s (%d bytes, %d messages held; bounds %d, %d)",
        route, client, cause, held, bound.held_messages, bound.max_bytes, bound.max_messages,
    )  # fmt: skip
