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
A client on the forwarder's own loopback (a station dialling its PC's
``127.0.0.1``) is counted under the forwarder's address: that is its host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from relay.server.host import Host
from relay.wire.proxy_header import NEED_MORE, Address, HeaderReader, Refused, Verified

log = logging.getLogger("stkrelay.relay")


def admission_address(src: Address, via: Address) -> str:
    """The address a forwarded client is counted under: its own, unless it is on the
    forwarder's loopback (then it is the forwarder's host: `via`'s address)."""
    try:
        local = ipaddress.ip_address(src[0]).is_loopback and not ipaddress.ip_address(via[0]).is_loopback
    except ValueError:
        local = False
    return via[0] if local else src[0]


def shown(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class HeaderStage(asyncio.Protocol):
    """The protocol of one accepted connection until its first bytes are decided (module docstring)."""

    def __init__(self, peer: Any, host: Host, key: str) -> None:
        self.peer, self.host, self.key = peer, host, key
        self.transport: asyncio.Transport | None = None
        self.reader: HeaderReader | None = None
        self.via: Address | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer.connection_made(transport)
        name = transport.get_extra_info("peername")
        if self.peer.dead or not self.key or not isinstance(name, tuple) or len(name) < 2:
            transport.set_protocol(self.peer)  # refused at the accept, or no address to check against
            return
        self.via = (str(name[0]), int(name[1]))
        self.reader = HeaderReader(self.key, self.via)

    def data_received(self, data: bytes) -> None:
        peer, reader, transport = self.peer, self.reader, self.transport
        if reader is None or transport is None or peer.dead:
            peer.data_received(data)
            return
        try:
            reading = reader.feed(data)
            if reading is NEED_MORE:
                return
            transport.set_protocol(peer)
            if isinstance(reading, Refused):
                self._close()
                self.host.header_refused(peer, reading.cause, reading.detail)
                return
            if isinstance(reading, Verified):
                assert self.via is not None
                address = admission_address(reading.src, self.via)
                if not self.host.readdress(peer, address, f"{shown(reading.src)} via {shown(self.via)}"):
                    self._close()
                    return
        except Exception:
            peer.crashed("data_received (forwarded header)")
            return
        if reader.rest:
            peer.data_received(reader.rest)

    def _close(self) -> None:
        """Closed without a frame: the hello went out, nothing else will."""
        self.peer.dead = True
        assert self.transport is not None
        self.transport.abort()

    def eof_received(self) -> bool | None:
        return self.peer.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.peer.connection_lost(exc)

    def pause_writing(self) -> None:
        self.peer.pause_writing()

    def resume_writing(self) -> None:
        self.peer.resume_writing()


def staged(kind: Callable[[Host], Any], host: Host, key: str) -> HeaderStage:
    """The protocol factory's product for a listener of peers `kind` (`RelayServer.listen_on`)."""
    return HeaderStage(kind(host), host, key)
