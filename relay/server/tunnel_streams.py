"""A remote client's stream through the tunnel, as the site's relay sees it (docs/design.md §14).

- `StreamTransport`: one mux stream as the `asyncio.Transport` of a relay peer;
  `write()` never blocks: bytes wait in the stream's mux queue for the cloud's
  credit, and a peer whose queue passes its high-water mark is paused, which
  the relay's policy answers by dropping it like a slow LAN viewer.
- `TunnelledJsonPeer`, `TunnelledPassthroughPeer`: the relay's own peers, minus
  the hello (the cloud greeted) and with ``leader_changed`` naming no address
  (the way back is the cloud).

The tunnel that owns the streams is a `StreamHost` (`relay.server.cloud_tunnel.TunnelClient`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from relay.server.connections import JsonPeer, PassthroughPeer
from relay.wire.mux import Mux

CLOSE_DRAIN = 1.0  # seconds a closing stream may wait for credit to send what it still holds


class StreamHost(Protocol):
    """What a stream needs of its tunnel."""

    mux: Mux
    loop: asyncio.AbstractEventLoop
    streams: dict[int, StreamTransport]

    def flush_soon(self) -> None: ...


class _Tunnelled:
    """Mixin of the peers that came through the tunnel."""

    def greet(self, transport: asyncio.Transport, hello: bytes) -> None:
        pass  # the cloud sent its own hello, with the nonce this core was built with

    def leader_changed(self, epoch: int | None, ip: str | None, port: int | None) -> None:
        super().leader_changed(epoch, None, None)  # type: ignore[misc]  # the way back is the cloud


class TunnelledJsonPeer(_Tunnelled, JsonPeer):
    pass


class TunnelledPassthroughPeer(_Tunnelled, PassthroughPeer):
    pass


class StreamTransport(asyncio.Transport):
    """One mux stream as the `asyncio.Transport` of a relay peer."""

    def __init__(self, client: StreamHost, stream: int, peer: str, protocol: JsonPeer) -> None:
        super().__init__()
        self.client, self.stream, self.protocol = client, stream, protocol
        host, _, port = peer.rpartition(":")
        self.peername = (f"cloud/{host or peer}"[:80], int(port) if port.isdigit() else 0)
        self.high = 1 << 20
        self.closing = self.lost = self.paused = False

    # -- what a peer calls -----------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peername if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is not None:
            self.high = high

    def get_write_buffer_size(self) -> int:
        return self.client.mux.buffered(self.stream)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing or self.lost:
            return
        self.client.mux.write(self.stream, bytes(data))
        self.client.flush_soon()
        if not self.paused and self.get_write_buffer_size() > self.high:
            self.paused = True
            self.protocol.pause_writing()  # the relay's policy: a peer that does not keep up is dropped

    def is_closing(self) -> bool:
        return self.closing or self.lost

    def close(self) -> None:
        if self.closing or self.lost:
            return
        self.closing = True
        if self.get_write_buffer_size() == 0:
            self._end("closed by the site")
        else:
            self.client.loop.call_later(
                CLOSE_DRAIN, self._end, "closed by the site (undelivered bytes dropped)"
            )

    def abort(self) -> None:
        self.closing = True
        self._end("aborted by the site")

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    # -- what the tunnel calls ----------------------------------------------------------
    def writable(self) -> None:
        if self.closing and self.get_write_buffer_size() == 0:
            self._end("closed by the site")

    def _end(self, reason: str) -> None:
        if self.lost:
            return
        self.client.mux.close(self.stream, reason)
        self.client.flush_soon()
        self.gone()

    def gone(self) -> None:
        """The stream is over (either end): the peer's connection is lost."""
        if self.lost:
            return
        self.lost = True
        self.client.streams.pop(self.stream, None)
        self.client.loop.call_soon(self.protocol.connection_lost, None)
