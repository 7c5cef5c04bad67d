"""Forwarding a remote client to the node that holds its site's tunnel (issue 26 part 3).

Node B greeted a remote client (its ``hello``, its nonce) and read its
``register``; the directory says node A holds the site's tunnel. B opens a
connection to A's ``PEER_PORT`` and pipes the client through it: the client
keeps its one connection (a dumb TCP load balancer in front stays workable),
and the site's leader verifies the ``register`` over B's nonce as ever.

The peer handshake, both ways proven with ``PEER_TOKEN`` over fresh nonces:

1. A: ``STKPEER1 <challenge>\\n`` (32 hex, fresh).
2. B: one JSON line: ``kmsn``, ``kind`` (json | raw), ``nonce`` (the client's
   hello nonce), ``peer`` (the client's address, for the site's logs),
   ``from`` (B's NODE_ID, one of NODES), ``cnonce`` (32 hex, fresh) and
   ``mac`` = HMAC(PEER_TOKEN, "peer|" challenge|kmsn|kind|nonce|peer|from).
3. A: ``OK <HMAC(PEER_TOKEN, "peer-ok|" cnonce|challenge)>\\n``; only then does B
   send the client's bytes (its register among them), then raw both ways.

Everything one node reads from another is untrusted: a line longer than
`LINE_LIMIT`, not JSON, a field of the wrong type or size, a MAC that does not
verify, a node not in NODES, or a ``register`` that names another KMSN than the
header is refused, closed, and counted (``peer_refused`` by cause). A
forwarded client is never forwarded again (one hop: no loops).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import Any

from relay.cloud.peers import PeerServer, _keepalive
from relay.cloud.remote import Greeting
from relay.cloud.remote_peers import RemotePeer
from relay.wire.auth import is_nonce, new_nonce
from relay.wire.events import NAME_RULE, is_name

LINE_LIMIT = 4 << 10
MAGIC = b"STKPEER1 "
KINDS = ("json", "raw")
PEER_DEADLINE = 5.0


def _mac(token: str, *parts: str) -> str:
    return hmac.new(token.encode(), "|".join(parts).encode(), hashlib.sha256).hexdigest()


def header_line(token: str, challenge: str, kmsn: str, kind: str, nonce: str, peer: str, node: str,
                cnonce: str) -> bytes:  # fmt: skip
    mac = _mac(token, "peer", challenge, kmsn, kind, nonce, peer, node)
    doc = {"kmsn": kmsn, "kind": kind, "nonce": nonce, "peer": peer, "from": node, "cnonce": cnonce,
           "mac": mac}  # fmt: skip
    return json.dumps(doc).encode() + b"\n"


def ok_line(token: str, cnonce: str, challenge: str) -> bytes:
    return b"OK " + _mac(token, "peer-ok", cnonce, challenge).encode() + b"\n"


class PeerRefused(ValueError):
    def __init__(self, cause: str, detail: str) -> None:
        self.cause = cause
        super().__init__(detail)


def read_forward_header(
    token: str, challenge: str, line: bytes, nodes: dict[str, tuple[str, int]]
) -> dict[str, str]:
    """The verified header of a forwarded connection; `PeerRefused` (with a cause) if it is not one."""
    try:
        doc = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise PeerRefused("peer_bad_header", "the header is not JSON") from None
    if not isinstance(doc, dict):
        raise PeerRefused("peer_bad_header", "the header is not an object")
    given = {k: doc.get(k) for k in ("kmsn", "kind", "nonce", "peer", "from", "cnonce", "mac")}
    # printable: no lone surrogate (which the MAC's encode() would choke on), no control character
    fields = {k: v for k, v in given.items() if isinstance(v, str) and 0 < len(v) <= 128 and v.isprintable()}
    if len(fields) < len(given):
        raise PeerRefused("peer_bad_header", "the header's fields are strings of 1..128 printable characters")
    if not is_name(fields["kmsn"]):
        raise PeerRefused("peer_bad_header", f"the header's kmsn is not {NAME_RULE}")
    if fields["kind"] not in KINDS or not is_nonce(fields["nonce"]) or not is_nonce(fields["cnonce"]):
        raise PeerRefused("peer_bad_header", "kind json|raw, nonce and cnonce 32 hex")
    if fields["from"] not in nodes:
        raise PeerRefused("peer_unknown_node", f"node {fields['from'][:64]!r} is not in NODES")
    want = _mac(token, "peer", challenge, *(fields[k] for k in ("kmsn", "kind", "nonce", "peer", "from")))
    if not hmac.compare_digest(want, fields["mac"]):
        raise PeerRefused("peer_bad_mac", "the header's mac does not verify with PEER_TOKEN")
    return fields


class ForwardedPeer(RemotePeer):
    """On the node that holds the tunnel: a remote client another node forwards (PEER_PORT)."""

    forwarded = True

    def __init__(self, server: PeerServer) -> None:
        super().__init__(server)
        self.challenge = new_nonce()
        self.inbox = bytearray()
        self.verified = False
        self.via = ""
        self.claimed_kmsn = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        name = transport.get_extra_info("peername")
        self.peer = f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
        # Keyed by the connection, not its address: every forwarded client comes from a node's
        # address, and PEER_PORT is not public (see docs/cloud.md); pre-auth and total caps still hold.
        if not self.server.admit(self, f"peer:{self.peer}"):
            self.dead = True
            transport.abort()
            return
        _keepalive(transport)
        transport.write(MAGIC + self.challenge.encode() + b"\n")
        self.timer = self.loop.call_later(PEER_DEADLINE, self._expired)

    def data_received(self, data: bytes) -> None:
        if self.verified or self.dead:
            super().data_received(data)
            return
        self.inbox += data
        line, found, rest = bytes(self.inbox).partition(b"\n")
        if not found:
            if len(self.inbox) > LINE_LIMIT:
                self._refuse_peer("peer_bad_header", "header line too long")
            return
        if len(line) > LINE_LIMIT:
            self._refuse_peer("peer_bad_header", "header line too long")
            return
        cluster = self.server.cfg.cluster
        assert cluster is not None
        try:
            header = read_forward_header(cluster.peer_token, self.challenge, line, cluster.nodes)
        except PeerRefused as exc:
            self._refuse_peer(exc.cause, str(exc))
            return
        self.inbox.clear()
        self.verified = True
        self.claimed_kmsn = header["kmsn"]
        self.kind = header["kind"]
        self.via = header["from"]
        self.peer = header["peer"][:64]
        self.greeting = Greeting(nonce=header["nonce"])
        assert self.transport is not None
        self.transport.write(ok_line(cluster.peer_token, header["cnonce"], self.challenge))
        self.server.count("peer_forwarded_in")
        if rest:
            self.data_received(rest)

    def admissible(self) -> bool:
        if self.kmsn != self.claimed_kmsn:
            self._refuse_peer(
                "peer_kmsn_mismatch", f"header names {self.claimed_kmsn[:64]}, register {self.kmsn[:64]}"
            )
            return False
        return True

    def _refuse_peer(self, cause: str, detail: str) -> None:
        self.server.count(cause)
        self.server.refused(cause, f"forwarded connection from {self.peer}", detail)
        self.dead = True
        if self.transport is not None:
            self.transport.abort()

    def _expired(self) -> None:
        if not self.verified and not self.dead:
            self.timer = None
            self._refuse_peer("peer_timeout", "no header within the deadline")
            return
        super()._expired()

    def tunnel_gone(self, epoch: int | None) -> None:
        """The tunnel went: close; the node in front tells the client (it knows its own address)."""
        self.tunnel = None
        if not self.dead:
            self.server.count("moved")
            self._close()


class PeerLink(asyncio.Protocol):
    """On the node in front: one remote client's way to the node holding its tunnel.

    Looks like a tunnel to the `RemotePeer` (one stream): `open_stream`, `write`,
    `close_stream`, `flush_soon`, `mux.buffered`/`mux.consumed`, `dead`."""

    def __init__(self, server: Any, remote: RemotePeer, node: str) -> None:
        self.server, self.remote, self.node = server, remote, node
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.pending = bytearray()  # the client's bytes until the far node proved itself
        self.inbox = bytearray()
        self.stage = "connecting"  # -> challenged -> open | failed
        self.cnonce = new_nonce()
        self.challenge = ""
        self.dead = False
        self.paused = False
        self.timer: asyncio.TimerHandle | None = None

    @property
    def mux(self) -> PeerLink:
        return self

    # -- what the RemotePeer calls ------------------------------------------------------
    def open_stream(self, remote: RemotePeer, kind: str, nonce: str, peer: str) -> int:
        return 1

    def write(self, stream: int, data: bytes) -> None:
        if self.stage == "open" and self.transport is not None:
            self.transport.write(data)
        elif len(self.pending) + len(data) <= LINE_LIMIT * 32:
            self.pending += data
        else:
            self._fail("peer_overflow")

    def buffered(self, stream: int) -> int:
        size = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return size + len(self.pending)

    def consumed(self, stream: int, n: int) -> None:
        if self.paused and self.transport is not None and not self.remote.paused_writing:
            self.paused = False
            self.transport.resume_reading()

    def flush_soon(self) -> None:
        pass

    def close_stream(self, stream: int, reason: str) -> None:
        self.dead = True
        if self.transport is not None:
            self.transport.close()

    # -- asyncio --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        _keepalive(transport)
        self.timer = self.loop.call_later(PEER_DEADLINE, self._fail, "peer_timeout")

    def data_received(self, data: bytes) -> None:
        if self.stage == "open":
            self.remote.from_site(data)
            if self.remote.paused_writing and self.transport is not None and not self.paused:
                self.paused = True
                self.transport.pause_reading()
            return
        if self.stage == "failed":
            return
        self.inbox += data
        line, found, rest = bytes(self.inbox).partition(b"\n")
        if not found:
            if len(self.inbox) > 256:
                self._fail("peer_bad_answer")
            return
        self.inbox = bytearray(rest)
        cluster = self.server.cfg.cluster
        remote = self.remote
        assert self.transport is not None
        if self.stage == "connecting":
            challenge = line[len(MAGIC) :].decode("ascii", "replace")
            if not line.startswith(MAGIC) or not is_nonce(challenge):
                self._fail("peer_bad_answer")
                return
            self.challenge = challenge
            self.stage = "challenged"
            self.transport.write(header_line(cluster.peer_token, challenge, remote.kmsn, remote.kind,
                                             remote.greeting.nonce, remote.peer[:64], cluster.node,
                                             self.cnonce))  # fmt: skip
        elif self.stage == "challenged":
            if not hmac.compare_digest(line, ok_line(cluster.peer_token, self.cnonce, self.challenge)[:-1]):
                self._fail("peer_bad_answer")
                return
            self.stage = "open"
            if self.timer is not None:
                self.timer.cancel()
            self.server.count("peer_forwarded_out")
            self.transport.write(bytes(self.pending))
            self.pending.clear()
        if self.inbox and self.stage == "open":
            data, self.inbox = bytes(self.inbox), bytearray()
            self.data_received(data)

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        self.remote.writable()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        was_open, self.dead = self.stage == "open", True
        if self.stage == "failed":
            return
        self.stage = "failed"
        if was_open:
            self.remote.tunnel_gone(None)
        else:
            self.server.forward_failed(self, "peer_closed")

    def _fail(self, cause: str) -> None:
        if self.stage in ("failed", "open") and cause != "peer_overflow":
            return
        was_open = self.stage == "open"
        self.stage, self.dead = "failed", True
        if self.transport is not None:
            self.transport.abort()
        if was_open:
            self.remote.tunnel_gone(None)
        else:
            self.server.forward_failed(self, cause)
