"""What a relay connection (`relay.server.connections`) sees of the server that accepted it.

`Host` is the narrow interface a peer is built with (`relay.server.relay_server.RelayServer`
implements it); `Batch` collects the frames routed while one chunk from a
sender is handled, to write them once per recipient. Neither knows the peer
class: a peer is anything with the few attributes `Peer` names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any, Protocol, TypeVar

from relay.server.routing import Router
from relay.wire.legacy import LegacyDesk
from relay.wire.server_connection import ServerConnection

Successor = tuple[int | None, str | None, int | None]  # (epoch, ip, port) of ``leader_changed``


class Peer(Protocol):
    """What `Batch` and `Host` need of a connection."""

    pending: list[bytes]
    dead: bool
    transport: Any


class Batch:
    """The frames routed while one chunk from a sender is handled, one write per recipient.

    While `active`, `hold()` keeps a recipient's frames; `flush()` writes each
    recipient's frames joined, skipping peers that died meanwhile.
    """

    def __init__(self) -> None:
        self.active = False
        self.dirty: list[Peer] = []

    def hold(self, peer: Peer, frame: bytes) -> bool:
        """Keep `frame` for `peer` until `flush()`; False when no batch is open."""
        if not self.active:
            return False
        if not peer.pending:
            self.dirty.append(peer)
        peer.pending.append(frame)
        return True

    def flush(self) -> None:
        self.active = False
        dirty, self.dirty = self.dirty, []
        for peer in dirty:
            pending, peer.pending = peer.pending, []
            if not peer.dead and pending and peer.transport is not None:
                peer.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))


# The server's peers (`relay.server.connections.JsonPeer`): what a `Host` is handed back.
P = TypeVar("P", bound=Peer, contravariant=True)


class Host(Protocol[P]):
    """What a peer needs from the server that accepted it, and nothing more."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def router(self) -> Router: ...

    @property
    def batch(self) -> Batch: ...

    @property
    def buffer_limit(self) -> int: ...  # write-buffer high-water mark: over it, the peer is dropped

    @property
    def handshake_limit(self) -> int: ...  # bytes a peer may send before registering

    @property
    def successor(self) -> Successor | None: ...  # set once leadership is lost

    @property
    def legacy(self) -> LegacyDesk | None: ...  # old stations' desk, with RELAY_LEGACY on (relay.wire.legacy)

    def new_connection(
        self, *, roles: Collection[str], raw_mode: bool, nonce: str | None = None, peer: str = "?"
    ) -> ServerConnection:
        """The sans-I/O core for one new connection (it queues ``hello``; `nonce`:
        the one another relay's hello sent, for a peer that came through a tunnel;
        `peer`: its address, named in a refusal)."""
        ...

    def admit(self, peer: P, address: str) -> bool: ...  # False: refuse it, no frame (relay.server.limits)

    def readdress(self, peer: P, address: str, shown: str) -> bool: ...  # relay.server.forwarded

    def header_refused(self, peer: P, cause: str, detail: str) -> None: ...  # its header did not verify

    def hold(self, address: str) -> bool: ...  # over its cap: wait for a header? (Admission)

    def unhold(self, address: str) -> None: ...

    def admit_as(self, peer: P, address: str) -> None: ...  # its admit() counts it under `address`

    def joined(self, peer: P) -> None: ...  # it registered: it can no longer be evicted

    def attach(self, peer: P) -> None: ...  # a connection was accepted

    def detach(self, peer: P) -> None: ...  # it is gone

    def count(self, what: str) -> None: ...  # a connection closed by the server, by cause

    def rejected_frame(self) -> None: ...  # a non-fatal bad frame

    def refused(self, cause: str, fmt: str, *args: Any, level: int | None = None) -> None:
        """Log refused input (``fmt % args``) within the relay's budget of lines per cause
        (`relay.server.refusal_log`): a flood of bad frames is summed up, not written out."""
        ...

    def serving(self) -> bool: ...  # asked before a registered peer's bytes are routed: the gate, now
