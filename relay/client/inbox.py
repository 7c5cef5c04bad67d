"""The receive side of a relay client: a bounded inbox that drops duplicates.

Delivery is at least once (`relay.client.outbox`): after a failover a sender may
write a message again that the old relay had already routed. A `Received`
whose (sender role, sender station, id) is among the last `dedup_size` seen is
dropped and counted in `Counters.duplicates`; a message without an id (or with
an id that cannot be hashed) is never taken for a duplicate.

Interface: `Inbox(size, dedup_size, counters)`; a session calls `deliver()`,
the caller's `RelayClient.messages()` / `receive()` call `get()`, `close()` ends it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable

from relay.client.events import ClientClosed, Counters, Received, ServerError

_CLOSED = object()


class Inbox:
    """Received messages and error frames, in arrival order; bounded (oldest dropped)."""

    def __init__(self, size: int, dedup_size: int, counters: Counters) -> None:
        if size < 1 or dedup_size < 0:
            raise ValueError("inbox_size must be at least 1 and dedup_size at least 0")
        self.size, self.dedup_size = size, dedup_size
        self.counters = counters
        self._items: asyncio.Queue[object] = asyncio.Queue()
        self._seen: set[Hashable] = set()
        self._order: deque[Hashable] = deque()

    def deliver(self, item: Received | ServerError) -> None:
        if isinstance(item, Received) and self._duplicate(item):
            self.counters.duplicates += 1
            return
        if self._items.qsize() >= self.size:
            self._items.get_nowait()
            self.counters.inbox_dropped += 1
        self._items.put_nowait(item)

    def _duplicate(self, item: Received) -> bool:
        if item.id is None or self.dedup_size == 0:
            return False
        key = (item.sender_role, item.sender_station, item.id)
        try:
            if key in self._seen:
                return True
        except TypeError:  # an id such as a list: no way to remember it
            return False
        self._seen.add(key)
        self._order.append(key)
        if len(self._order) > self.dedup_size:
            self._seen.discard(self._order.popleft())
        return False

    def close(self) -> None:
        """End `get()` for every reader, after what is already in."""
        self._items.put_nowait(_CLOSED)

    async def get(self, timeout: float | None = None) -> Received | ServerError:
        """The next item; `ClientClosed` once closed, `TimeoutError` after `timeout`."""
        async with asyncio.timeout(timeout):
            item = await self._items.get()
        if item is _CLOSED:
            self._items.put_nowait(_CLOSED)  # end every other reader too
            raise ClientClosed("the client is closed")
        assert isinstance(item, Received | ServerError)
        return item
