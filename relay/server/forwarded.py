"""A forwarded client keeps its own address at the relay (issue 40, finding 4).

An entry member, the ``/ws/relay/`` bridge and a member's loopback forwarder send,
as the first bytes of each connection they open to the relay, a keyed PROXY v2
header naming their client (`relay.wire.proxy_header`). `HeaderStage` stands in
front of a relay peer (`relay.server.connections.JsonPeer` and kin) from the
accept until the first bytes are decided, then hands the transport to the peer
(``set_protocol``) and is out of the way:

- no header (the first byte differs from the signature): every byte goes to the
  peer untouched, as without the stage;
- a verified header: the connection is counted under the client's address from
  now on (`Host.readdress`: the forwarder's place is released, the client's taken;
  over the per-address cap it is closed, counted ``per_address``), the peer shows
  ``client via forwarder``, and the bytes after the header go to the peer;
- a header that does not verify (no pool key, a wrong MAC, made for another socket,
  malformed, too long): closed without a frame, counted ``header_<cause>`` in the
  relay's drops (a security cause), logged at most once per 100 (`Host.header_refused`).

The relay speaks first (its hello is sent at the accept): a forwarder writes the
header at once, so the client's own first bytes come after it. A prefix of a header
that never ends is closed by the peer's register timeout, like any silent client.

A forwarder's burst (its remote clients all reconnecting after a failover) arrives
faster than the headers are read, and until then each connection counts under the
forwarder's address. So a newcomer from an address at its per-address cap is not
refused at once: it waits, without a hello, up to `HOLD_S` for its first bytes
(`relay.server.limits.Admission.hold`: at most half of ``preauth`` such in all). A
verified header admits it under its client's address; no header, or none in time,
and it is judged by its own address as before: refused over the cap
(``per_address``), without a frame.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from relay.server.host import Host

if TYPE_CHECKING:
    from relay.server.connections import JsonPeer
from relay.wire.proxy_header import NEED_MORE, Address, HeaderReader, HeaderRefused, Verified

log = logging.getLogger("stkrelay.relay")

HOLD_S = 0.5  # how long a connection over its address's cap may wait for a forwarded-client header


def admission_address(src: Address, via: Address) -> str:
    """The address a forwarded client is counted under: its own, unless it is on the
    forwarder's loopback (then it is the forwarder's host: `via`'s address)."""
    try:
        local = ipaddress.ip_address(src[0]).is_loopback and not ipaddress.ip_address(via[0]).is_loopback
    except ValueError:
        local = False
    return via[0] if local else src[0]


def address_shown(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class HeaderStage(asyncio.Protocol):
    """The protocol of one accepted connection until its first bytes are decided (module docstring)."""

    def __init__(self, peer: JsonPeer, host: Host[JsonPeer], key: str) -> None:
        self.peer, self.host, self.key = peer, host, key
        self.transport: asyncio.Transport | None = None
        self.reader: HeaderReader | None = None
        self.via: Address | None = None
        self.holding: asyncio.TimerHandle | None = None  # over its address's cap: waiting for a header

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        name = transport.get_extra_info("peername")
        if not self.key or not isinstance(name, tuple) or len(name) < 2:
            self._hand_over()  # no address to check a header against
            self.peer.connection_made(transport)
            return
        self.via = (str(name[0]), int(name[1]))
        self.reader = HeaderReader(self.key, self.via)
        if self.host.hold(self.via[0]):
            self.peer.peer = address_shown(self.via)  # named in a refusal while held
            self.holding = self.host.loop.call_later(HOLD_S, self._held_long_enough)
            return
        self._admit()

    def _admit(self, address: str | None = None) -> None:
        """The peer's own start (admission, hello); `address`: count it there, not as the socket's."""
        assert self.transport is not None
        if address is not None:
            self.host.admit_as(self.peer, address)
        self.peer.connection_made(self.transport)
        if self.peer.dead:  # refused by a cap: nothing more to read here
            self._hand_over()

    def _hand_over(self) -> None:
        self.reader = None
        if self.transport is not None:
            self.transport.set_protocol(self.peer)

    def _unhold(self) -> bool:
        if self.holding is None:
            return False
        self.holding.cancel()
        self.holding = None
        assert self.via is not None
        self.host.unhold(self.via[0])
        return True

    def _held_long_enough(self) -> None:
        """No header came while held: the connection is judged by its own address now."""
        if not self._unhold():
            return
        try:
            if self.reader is not None and self.reader.held:
                self._refused("truncated", "a header that did not end in time")
                return
            self._admit()
        except Exception:
            self.peer.crashed("connection_made (held for a header)")

    def data_received(self, data: bytes) -> None:
        peer, reader = self.peer, self.reader
        if reader is None or self.transport is None:
            peer.data_received(data)
            return
        try:
            reading = reader.feed(data)
            if reading is NEED_MORE:
                return
            held = self._unhold()
            if isinstance(reading, HeaderRefused):
                self._refused(reading.cause, reading.detail)
                return
            self._hand_over()
            if isinstance(reading, Verified):
                assert self.via is not None
                address = admission_address(reading.src, self.via)
                if held:
                    self._admit(address)
                    if peer.dead:
                        return
                if not self.host.readdress(
                    peer, address, f"{address_shown(reading.src)} via {address_shown(self.via)}"
                ):
                    self._close()
                    return
            elif held:  # no header: a client of its own, over its address's cap
                self._admit()
                if peer.dead:
                    return
        except Exception:
            peer.crashed("data_received (forwarded header)")
            return
        if reader.rest:
            peer.data_received(reader.rest)

    def _refused(self, cause: str, detail: str) -> None:
        self._close()
        self.host.header_refused(self.peer, cause, detail)

    def _close(self) -> None:
        """Closed without a frame (after the hello, if it went out)."""
        self.reader = None
        self.peer.dead = True
        assert self.transport is not None
        self.transport.abort()

    def eof_received(self) -> bool | None:
        return self.peer.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._unhold()
        self.peer.connection_lost(exc)

    def pause_writing(self) -> None:
        self.peer.pause_writing()

    def resume_writing(self) -> None:
        self.peer.resume_writing()


def staged(kind: Callable[[Host[JsonPeer]], JsonPeer], host: Host[JsonPeer], key: str) -> HeaderStage:
    """The protocol factory's product for a listener of peers `kind` (`RelayServer.listen_on`)."""
    return HeaderStage(kind(host), host, key)
