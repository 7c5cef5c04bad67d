"""The relay's asyncio TCP servers: framed JSON and passthrough (docs/design.md §8).

One job: listen, and hold what the connections share (the routing table, the
write batch, the counters, the leadership flag). Each connection is a peer of
`relay.server.connections` (an `asyncio.Protocol` over the sans-I/O
`relay.wire.server_connection.ServerConnection`) that reaches this server only through the
narrow `relay.server.connections.Host` interface, which `RelayServer` implements.
Routing is `relay.server.routing.Router`; the peers are its sessions.

    server = RelayServer(node="S001", kmsn=..., token=..., gate=lambda: True, epoch=lambda: 7)
    await server.start("192.168.1.10", 9530)    # JSON on 9530, passthrough on 9531
    ...
    server.lose_leadership(8, "192.168.1.11", 9530)
    await server.wait_closed()

Decisions worth knowing:

- The gate is asked at every registration (by the core) and before a
  registered peer's bytes are routed (`serving()`); after
  `lose_leadership()` it is closed for good, whatever the callable says.
- Bounded memory. Each peer's transport gets a write-buffer high-water mark
  (`buffer_limit`, 4 MiB); a peer that goes over it (it does not read fast
  enough) is dropped at once with a log line: nothing ever waits for a slow
  peer, so a sender, a publisher or the other viewers are never stalled.
  Before registration a peer may send at most `handshake_limit` bytes
  (64 KiB), so an unauthenticated peer cannot make the server buffer a whole
  `max_frame`; over it, it gets ``frame_too_large``.
- Writes are batched: the messages routed while handling one chunk read from a
  sender are joined into one write per recipient.
- Silence: a registered JSON peer silent for 3 × `keepalive` is closed with
  ``timeout``. Passthrough peers are exempt (a viewer never speaks and a
  publisher may pause); they are dropped when they stop reading instead, and
  TCP keepalive is on for every socket.
- A viewer's bytes after registration are read and discarded.
- An exception in a peer's callback is logged and closes that peer only.
- Addresses: `start()` binds the first (NODE_IP); `listen_on()` /
  `stop_listening()` add and remove others on the same two ports, as the
  runner's `relay.server.listen_set.ListenSet` says (loopback, a VIP while held).
  Leaving an address closes the connections accepted on it.
- Keys (protocol 1.1, docs/design.md §8): a client authenticates with the site
  `token` or its station's credential (derived from `pool_key`, default
  `token`); `station_keys_only` refuses the site token. A station held by
  its credential cannot be taken over with the site token (`relay.server.routing`),
  and a station the pool holds bound to its credential (`bindings`, a
  `relay.server.bindings.StationBindings`) is refused the site token even when no
  session holds it; admissions and refusals are in ``snapshot()["stations"]``.
- Old stations (``RELAY_LEGACY = 1``, `relay.wire.legacy`): with `legacy` given,
  both listeners use `relay.server.legacy_peer`'s peers (the hello held for a client
  that speaks first, the old register admitted), counted in
  ``snapshot()["legacy"]``; peers through the cloud's tunnel stay v1 only.
- Connection caps (`relay.server.limits`): total, unregistered and per-address,
  sized from the soft ``RLIMIT_NOFILE`` at every accept unless `caps` is
  given; refusals close without a frame, evictions of the oldest
  unregistered connection send ``timeout``; all are counted in
  ``snapshot()["admission"]``.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from relay.server.bindings import StationBindings
from relay.server.connections import JsonPeer, PassthroughPeer
from relay.server.forwarded import staged
from relay.server.host import Batch, Successor
from relay.server.legacy_peer import legacy_kind
from relay.server.limits import Admission, Caps, backlog
from relay.server.listen_set import bound_socket
from relay.server.refusal_log import RefusalLog
from relay.server.routing import Router
from relay.wire.events import KEEPALIVE_INTERVAL, REGISTER_TIMEOUT, Registered
from relay.wire.framing import DEFAULT_MAX_FRAME
from relay.wire.legacy import LegacyDesk, LegacySettings
from relay.wire.server_connection import ServerConnection

try:
    import resource
except ImportError:  # Windows: no RLIMIT_NOFILE; the Proactor has no select() limit either
    resource = None  # type: ignore[assignment]

log = logging.getLogger("stkrelay.relay")

BUFFER_LIMIT = 4 << 20
HANDSHAKE_LIMIT = 64 << 10
BACKLOG = 1024
NOFILE_FALLBACK = 8192  # where the file limit cannot be read, or is unlimited


def file_limit() -> int:
    """The soft ``RLIMIT_NOFILE`` of this process (`NOFILE_FALLBACK` where unknown)."""
    if resource is None:
        return NOFILE_FALLBACK
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return NOFILE_FALLBACK if soft == resource.RLIM_INFINITY or soft <= 0 else soft


class RelayServer:
    """Both listeners of one relay, its routing table and its counters.

    `gate()` says whether this node may register clients now (asked at every
    registration; an exception counts as no); `epoch` (a callable, or an int)
    is the epoch announced in ``hello`` and fencing every session. All methods
    but `start()`/`wait_closed()` are plain and must run on the server's loop.
    The peers use it as their `relay.server.connections.Host`.
    """

    def __init__(
        self,
        *,
        node: str,
        kmsn: str,
        token: str,
        gate: Callable[[], bool],
        epoch: Callable[[], int] | int,
        max_frame: int = DEFAULT_MAX_FRAME,
        keepalive: float = KEEPALIVE_INTERVAL,
        register_timeout: float = REGISTER_TIMEOUT,
        buffer_limit: int = BUFFER_LIMIT,
        handshake_limit: int = HANDSHAKE_LIMIT,
        pool_key: str | None = None,
        station_keys_only: bool = False,
        caps: Caps | None = None,
        max_per_address: int | None = None,
        bindings: StationBindings | None = None,
        legacy: LegacySettings | None = None,
        successor: Callable[[], tuple[int, str, int] | None] | None = None,
    ) -> None:
        if not token:
            raise ValueError("token must not be empty")
        if keepalive <= 0 or register_timeout <= 0 or buffer_limit <= 0:
            raise ValueError("keepalive, register_timeout and buffer_limit must be positive")
        self.node, self.kmsn, self.token = node, kmsn, token
        self.pool_key, self.station_keys_only = pool_key or token, station_keys_only
        self.admission = Admission(
            (lambda: caps) if caps else lambda: Caps.sized(file_limit(), max_per_address)
        )
        self.bindings = bindings if bindings is not None else StationBindings()
        self.gate = gate
        # Whom the gate names as the next leader (`relay.runner.gate.LeadershipGate.successor`), if it can.
        self.successor_named = successor
        self.epoch = epoch
        self.legacy = LegacyDesk(legacy) if legacy is not None else None  # old stations (relay.wire.legacy)
        self.max_frame = max_frame
        self.keepalive = keepalive
        self.silence = 3 * keepalive
        self.register_timeout = register_timeout
        self.buffer_limit = buffer_limit
        self.handshake_limit = handshake_limit
        self.router = Router(max_frame=max_frame)
        self.peers: set[JsonPeer] = set()
        self.leading = True
        self.batch = Batch()
        self.drops: dict[str, int] = {}  # connections closed by the server, by cause
        self.rejected = 0  # non-fatal bad frames (unknown type after registration)
        self.successor: Successor | None = None
        self.forwarded: dict[str, str] = {}  # a forwarder's end of a connection -> what the peer shows
        self.admitting_as: dict[JsonPeer, str] = {}  # a held connection's client (relay.server.forwarded)
        self.all_closed: asyncio.Event | None = None
        self.addresses: dict[str, tuple[str, int]] = {}
        self._listeners: list[asyncio.Server] = []
        self._hosts: dict[str, list[asyncio.Server]] = {}  # address -> its (json, passthrough) listeners
        self._ports: tuple[int, int] = (0, 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        # Refused input, logged within a budget per cause (its counts are in `drops` and `legacy`).
        self.refusal_log = RefusalLog(log, now=time.monotonic, later=self._later)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "start() the server first"
        return self._loop

    async def start(self, host: str, port: int, passthrough_port: int | None = None) -> None:
        """Listen on `host`: JSON on `port`, passthrough on `passthrough_port`
        (default `port` + 1; 0 picks a free port). Raises `OSError` if either
        cannot be bound (then neither listens). More addresses: `listen_on()`."""
        self._loop = asyncio.get_running_loop()
        second = port + 1 if passthrough_port is None else passthrough_port
        self._ports = (port, second)
        await self.listen_on(host)
        for name, listener in zip(("json", "passthrough"), self._hosts[host], strict=True):
            self.addresses[name] = listener.sockets[0].getsockname()[:2]
        self._ports = (self.addresses["json"][1], self.addresses["passthrough"][1])

    async def listen_on(self, host: str, *, freebind: bool = False) -> None:
        """Listen on one more address, both ports (those `start()` bound), with
        ``IP_FREEBIND`` if asked (`relay.server.listen_set`). Raises `OSError` if either
        port cannot be bound (then neither listens there); a no-op where it
        listens already."""
        if not self.leading:
            raise OSError(errno.EPERM, "this relay no longer leads")
        if host in self._hosts:
            return
        self._loop = asyncio.get_running_loop()
        made: list[asyncio.Server] = []
        try:
            for kind, number in zip((JsonPeer, PassthroughPeer), self._ports, strict=True):
                kind = legacy_kind(kind) if self.legacy is not None else kind
                sock = bound_socket(host, number, freebind=freebind)
                factory = functools.partial(staged, kind, self, self.pool_key)  # forwarded clients' headers
                made.append(await self._loop.create_server(factory, sock=sock, backlog=self.backlog))
        except OSError:
            for listener in made:
                listener.close()
            raise
        self._hosts[host] = made
        self._listeners.extend(made)

    def stop_listening(self, host: str) -> None:
        """Stop listening on `host` (an address that left this host) and close the
        connections accepted there: their packets go elsewhere now."""
        for listener in self._hosts.pop(host, []):
            listener.close()
            self._listeners.remove(listener)
        for peer in list(self.peers):
            sockname = peer.transport.get_extra_info("sockname") if peer.transport is not None else None
            if sockname and sockname[0] == host:
                peer.abort()

    @property
    def listening_on(self) -> list[str]:
        """Every address with open listeners, the one `start()` bound first."""
        return [h for h, listeners in self._hosts.items() if any(s.is_serving() for s in listeners)]

    @property
    def backlog(self) -> int:
        return min(BACKLOG, backlog(file_limit()))

    @property
    def listening(self) -> bool:
        return any(listener.is_serving() for listener in self._listeners)

    def current_epoch(self) -> int:
        return self.epoch() if callable(self.epoch) else self.epoch

    def gate_open(self) -> bool:
        return self.leading and bool(self.gate())

    def serving(self) -> bool:
        """Asked before a registered peer's bytes are routed (`relay.server.connections`): the
        gate's deadline passes between two looks of the runner too, and a relay woken
        from a freeze finds in its sockets what clients sent meanwhile, which it must
        not forward (docs/design.md §15). A shut gate loses leadership here and now."""
        if not self.leading:
            return False
        try:
            if self.gate():
                return True
        except Exception:  # fail closed, like the registration gate
            pass
        log.warning("the gate shut between two looks: closing every connection before routing more")
        self.lose_leadership(*self._named_successor())
        return False

    # -- relay.server.connections.Host: what the peers see of the server -------------------------
    def _named_successor(self) -> tuple[int | None, str | None, int | None]:
        """Whom the gate names as the next leader (a handoff this agent wrote, `gate.successor()`,
        where the gate has one): the clients go there at once instead of looking for it."""
        named = self.successor_named
        try:
            found = named() if named is not None else None
        except Exception:  # a hint only: without it the clients look for the leader themselves
            found = None
        return found if found is not None else (None, None, None)

    # -- relay.sessions.Host: what the peers see of the server -------------------------
    def new_connection(
        self, *, roles: Collection[str], raw_mode: bool, nonce: str | None = None, peer: str = "?"
    ) -> ServerConnection:
        # Old stations are local ones: a peer through the cloud's tunnel (its nonce given) speaks v1.
        make = self.legacy.connection if self.legacy is not None and nonce is None else ServerConnection
        return make(
            node=self.node,
            epoch=self.current_epoch(),
            kmsn=self.kmsn,
            token=self.token,
            roles=roles,
            gate=self.gate_open,
            max_frame=self.max_frame,
            raw_mode=raw_mode,
            register_timeout=self.register_timeout,
            silence_timeout=self.silence,
            pool_key=self.pool_key,
            station_keys_only=self.station_keys_only,
            admit=functools.partial(self.may_register, peer=peer),
            nonce=nonce,
        )

    def may_register(self, registration: Registered, peer: str = "?") -> str | None:
        """Asked by the core before ``registered``: may it take its place? The site
        token may neither replace a live credential holder (`relay.server.routing`) nor
        take a station bound to its credential (`relay.server.bindings`); either refusal
        is an impersonation attempt, counted as ``bound_station``."""
        r = registration
        peer = self.forwarded.get(peer, peer)
        refusal = self.router.refusal(r.role, r.kmsn, r.station, r.station_key)
        refusal = self.bindings.refusal(r.role, r.station, r.station_key, peer, held=refusal)
        if refusal is None:
            self.bindings.admitted(r.role, r.station, r.station_key)
            return None
        self.count("bound_station")  # an impostor must not flood the log either:
        self.refused("bound_station", "refused the site token for %s/%s from %s: %s (%d such refusals)",
                     r.kmsn, r.station[:64], peer, refusal, self.drops["bound_station"],
                     level=logging.WARNING)  # fmt: skip
        return refusal

    def admit(self, peer: JsonPeer, address: str) -> bool:
        address = self.admitting_as.pop(peer, address)
        accepted, evicted = self.admission.admit(peer, address)
        if not accepted:
            refused = sum(self.admission.refused.values())
            if refused == 1 or refused % 1000 == 0:  # an attacker must not flood the log too
                log.warning("refused %d connections so far (now from %s): caps %s", refused, address,
                            self.admission.last)  # fmt: skip
        if isinstance(evicted, JsonPeer):
            waiting = len(self.admission.waiting) + 1
            evicted.evict(f"{waiting} connections are waiting to register; this one waited longest")
        return accepted

    def readdress(self, peer: JsonPeer, address: str, shown: str) -> bool:
        """A forwarded client (relay.server.forwarded): counted under `address` from now on,
        shown as `shown`; False if `address` has all the connections it may have."""
        if not self.admission.readdress(peer, address):
            refused = sum(self.admission.refused.values())
            if refused == 1 or refused % 1000 == 0:
                log.warning("refused %d connections so far (now %s): caps %s", refused, shown,
                            self.admission.last)  # fmt: skip
            return False
        self.forwarded[peer.peer] = shown
        peer.peer = shown
        return True

    def hold(self, address: str) -> bool:
        """Is a newcomer from `address`, over its cap, to wait for its first bytes (`Admission.hold`)?"""
        return self.admission.hold(address)

    def unhold(self, address: str) -> None:
        self.admission.unhold(address)

    def admit_as(self, peer: JsonPeer, address: str) -> None:
        """`peer`'s coming `admit()` counts it under `address` (its header named that client)."""
        self.admitting_as[peer] = address

    def header_refused(self, peer: JsonPeer, cause: str, detail: str) -> None:
        """A forwarded-client header that did not verify: a security cause, counted, logged rarely."""
        self.count(f"header_{cause}")
        n = sum(v for k, v in self.drops.items() if k.startswith("header_"))
        if n == 1 or n % 100 == 0:  # whoever forges them must not flood the log
            log.warning("refused a forwarded-client header from %s: %s, %s (%d such refusals)", peer.peer,
                        cause, detail[:120], n)  # fmt: skip

    def joined(self, peer: JsonPeer) -> None:
        self.admission.registered(peer)

    def attach(self, peer: JsonPeer) -> None:
        self.peers.add(peer)

    def detach(self, peer: JsonPeer) -> None:
        self.admission.release(peer)
        name = peer.transport.get_extra_info("peername") if self.forwarded and peer.transport else None
        if isinstance(name, tuple):
            self.forwarded.pop(f"{name[0]}:{name[1]}", None)
        self.peers.discard(peer)
        if not self.peers and self.all_closed is not None:
            self.all_closed.set()

    def count(self, what: str) -> None:
        self.drops[what] = self.drops.get(what, 0) + 1

    def rejected_frame(self) -> None:
        self.rejected += 1

    def refused(self, cause: str, fmt: str, *args: Any, level: int | None = None) -> None:
        self.refusal_log.refused(cause, fmt, *args, level=level)

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_later(delay, fn)

    # -- control -------------------------------------------------------------------------

    def lose_leadership(
        self, epoch: int | None = None, ip: str | None = None, port: int | None = None
    ) -> None:
        """Stop listening, refuse registrations, tell every JSON client where the
        leader went (``leader_changed``), and close every connection."""
        self.leading = False
        self.successor = (epoch, ip, port)
        for listener in self._listeners:
            listener.close()
        peers = list(self.peers)
        log.info("lost leadership: %d connections told epoch=%s ip=%s port=%s", len(peers), epoch, ip, port)
        for peer in peers:
            try:
                peer.leader_changed(epoch, ip, port)
            except Exception:
                peer.crashed("leader_changed")

    async def wait_closed(self, timeout: float = 0.5) -> None:
        """Wait up to `timeout` for the connections to flush and close; abort the rest."""
        if self.peers:
            self.all_closed = asyncio.Event()
            try:
                async with asyncio.timeout(timeout):
                    await self.all_closed.wait()
            except TimeoutError:
                for peer in list(self.peers):
                    peer.abort()
                await asyncio.sleep(0)  # let connection_lost run
        for listener in self._listeners:
            try:
                async with asyncio.timeout(timeout):
                    await listener.wait_closed()
            except TimeoutError:
                pass

    def snapshot(self) -> dict[str, Any]:
        """Counters and clients, JSON-serializable (relay.json, the panel)."""
        peers = list(self.peers)
        clients = sorted(
            (p.describe() for p in peers if p.registered and not p.dead),
            key=lambda d: (d["kmsn"], d["station"], d["role"], d["session"]),
        )
        return {
            "node": self.node,
            "kmsn": self.kmsn,
            "epoch": self.current_epoch(),
            "leading": self.leading,
            "listening": {name: f"{ip}:{port}" for name, (ip, port) in self.addresses.items()}
            if self.listening
            else {},
            "listening_on": self.listening_on,
            "connections": len(peers),
            "unregistered": sum(1 for p in peers if not p.registered),
            "counts": self.router.counts(),
            "clients": clients,
            "relayed": self.router.counters.as_dict(),
            "drops": dict(sorted(self.drops.items())),
            "rejected_frames": self.rejected,
            "refusals": dict(sorted(self.refusal_log.counts.items())),  # refused input, by cause
            "admission": self.admission.snapshot(),
            "stations": self.bindings.snapshot(),
            "legacy": self.legacy.snapshot(peers) if self.legacy is not None else {"enabled": False},
        }
