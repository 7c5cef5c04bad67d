"""The fencing proxy: raw TCP to an external relay, only while the gate is open (docs/design.md §16).

A foreign relay binary (`RELAY_KIND = exec`) cannot fence itself: it listens
on loopback only, and this proxy listens where the built-in relay would
(``NODE_IP:RELAY_PORT`` and ``RELAY_PORT + 1``) and forwards each accepted
connection to the matching port of the external relay. It has the listening
interface of `relay.server.relay_server.RelayServer` (`start`, `listening`, `addresses`,
`lose_leadership`, `wait_closed`, `snapshot`), so `relay.runner` serves
either the same way.

    proxy = FencingProxy(gate=gate, upstream=("127.0.0.1", 9540), ready=external.accepting)
    await proxy.start("192.168.1.10", 9530)      # -> 127.0.0.1:9540 and :9531 -> :9541
    ...
    proxy.lose_leadership()                      # every forwarded connection closed
    await proxy.wait_closed()

Decisions worth knowing:

- The gate is the built-in relay's (`relay.runner.gate.LeadershipGate`: the
  leadership state's monotonic renew deadline, epoch and worker pid). It is
  asked before **every** `send()` in either direction, not only at accept, so a
  leader frozen past its deadline and woken forwards nothing, whichever of its
  sockets the loop looks at first: the loop's callbacks are plain functions
  that check and then send, with nothing in between. When it says no, the pair
  is closed at once (with whatever it holds); `lose_leadership()` closes all.
- No transport, no unbounded buffer (each pair is a `relay.server.proxy_pair.Pair`):
  the sockets are non-blocking and driven with `add_reader`/`add_writer`. Each
  direction holds at most one chunk (`CHUNK`, 64 KiB) that the other side has
  not taken yet; while it does, that direction stops reading, so a slow reader
  slows its sender through TCP's own window (backpressure), and the proxy's
  memory is bounded by 2 chunks per connection and `max_connections`.
- Accepts are refused (closed at once) while the gate is shut or, without
  `redial_within`, the external relay is not accepting (`ready`); with it, a
  connection waits that long for the relay (and a refused connect is tried again:
  `relay.server.proxy_pair`), past `max_connections` (sized from the
  file limit: each connection holds two descriptors), and past
  `max_per_address` from one source address (``RELAY_MAX_PER_ADDRESS``, else
  the built-in relay's default), so one host cannot fill it; connections accepted on
  `lan_host` (the station door's `NODE_IP`) hold at most `lan_share` of
  `max_connections` (``lan_share``), so a LAN flood from many addresses leaves room
  for this PC's own stations on loopback. A connection to the
  external relay that does not complete in `connect_timeout` is closed.
- Zero-copy where it can (issue 36): on Linux the pairs splice socket → pipe → socket through
  one pipe of the proxy's (`relay.server.splice_pipe`), the gate asked before each splice;
  elsewhere, or once the kernel refuses (`no_splice`, logged once), they copy with
  `recv()`/`send()`. ``splice=False`` copies from the start.
- Half-close is forwarded (EOF one way becomes `shutdown(SHUT_WR)` the other
  way); the pair ends when both directions have ended, or on any error. Once the
  relay has ended its way, the client has `fin_timeout` to end its own (closed,
  counted ``fin_timeout``): a client that never speaks nor closes, turned away by
  the relay's caps, must not keep its two descriptors here (a slowloris).
- Forwarded clients (issue 40, `relay.wire.proxy_header`). With `header_key` (the
  pool key: `RELAY_KIND = exec`), a connection's first bytes may be a keyed PROXY v2
  header from a member's forwarder: verified, it moves the connection's per-address
  count to the client's own address (over the cap there: closed, counted
  ``per_address``) and is stripped, so the external relay sees the client's bytes
  untouched; one that does not verify closes the pair (``header_<cause>``, a
  security cause, logged once per 100). With `forward_header` (an entry member, a
  loopback forwarder), the proxy itself sends such a header, made by
  ``forward_header(client, dialled, local)``, as the first bytes upstream: at once,
  or, with `header_key` too, once the client's first bytes are decided (naming the
  client a verified header named). A forwarder's burst is not refused before its
  headers are read: with `header_key`, a connection from an address at its cap is
  held (at most `max_holding`) until its first bytes, for `HOLD_S` at most; a
  verified header counts it under its client's address, anything else under its
  own, where a full address closes it (``per_address``).
- Counted: connections accepted, refused (by cause), closed (by cause),
  active; bytes each way; shown in ``snapshot()`` (relay.json) and as the
  ``stkrelay_proxy_*`` metrics.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any

from relay.server.forwarded import address_shown, admission_address
from relay.server.limits import Caps
from relay.server.listen_set import bound_socket
from relay.server.proxy_pair import HeaderMaker, Pair
from relay.server.relay_server import file_limit
from relay.server.splice_pipe import SplicePipe
from relay.wire.proxy_header import Address

log = logging.getLogger("stkrelay.relay")

CONNECT_TIMEOUT = 2.0
FIN_TIMEOUT = 5.0  # how long a client may keep its side open once the relay has ended its own
HOLD_S = 0.5  # how long a connection over its address's cap may wait for a forwarded-client header
BACKLOG = 1024
ACCEPTS_PER_WAKE = 64  # accepts per readable listener before the loop looks at the others


def connection_cap(nofile: int) -> int:
    """Pairs this process can hold: two descriptors each, a tenth of the file limit kept back."""
    return max(8, int(nofile * 0.9) // 2)


def address_cap(nofile: int, per_address: int | None = None) -> int:
    """Pairs one source address may hold: ``RELAY_MAX_PER_ADDRESS``, else the built-in relay's
    default for its file limit (`relay.server.limits.Caps`), so one host cannot fill the proxy."""
    return per_address or Caps.sized(nofile).per_address


class FencingProxy:
    """Both listeners of the proxy, its pairs and its counters; everything on one loop.

    `gate()`: may this node serve now (an exception counts as no); `upstream`:
    the external relay's JSON port (its passthrough port is `upstream_passthrough`,
    default port + 1); `ready()`: does it accept now (`relay.server.external_relay`).
    """

    def __init__(
        self,
        *,
        gate: Callable[[], bool],
        upstream: tuple[str, int],
        upstream_passthrough: int | None = None,
        ready: Callable[[], bool] = lambda: True,
        held_back: Callable[[], bool] = lambda: False,
        redial_within: float = 0.0,
        connect_timeout: float = CONNECT_TIMEOUT,
        fin_timeout: float = FIN_TIMEOUT,
        max_connections: int | None = None,
        max_per_address: int | None = None,
        header_key: str | None = None,
        forward_header: HeaderMaker | None = None,
        splice: bool = True,
        lan_host: str | None = None,
        lan_share: float = 1.0,
        shut_cause: Callable[[], str] | None = None,
    ) -> None:
        self.gate, self.ready, self.held_back = gate, ready, held_back
        self.shut_cause = shut_cause  # why the gate is shut, for `refused` (else ``gate_shut``)
        self.redial_within = redial_within
        self.header_key, self.forward_header = header_key or None, forward_header
        self.headers = {"verified": 0, "refused": 0, "sent": 0}
        self.upstream = upstream
        self.upstream_passthrough = upstream[1] + 1 if upstream_passthrough is None else upstream_passthrough
        self.connect_timeout, self.fin_timeout = connect_timeout, fin_timeout
        self.max_connections = max_connections or connection_cap(file_limit())
        self.max_per_address = address_cap(file_limit(), max_per_address)
        self.per_address: dict[str, int] = {}
        self.holding = 0  # pairs over their address's cap waiting for a header (with header_key)
        self.max_holding = max(8, self.max_connections // 8)
        self.leading = True
        self.pairs: set[Pair] = set()
        self.lan_host, self.lan_share = lan_host, lan_share  # what pairs accepted on lan_host may hold
        self.lan_pairs: set[Pair] = set()
        self.addresses: dict[str, tuple[str, int]] = {}
        self.accepted = 0
        self.refused: dict[str, int] = {}
        self.closes: dict[str, int] = {}
        self.bytes = {"up": 0, "down": 0}
        self.spliced = 0  # of those bytes, both ways: moved by splice, never copied into Python
        self._listeners: list[socket.socket] = []
        self._hosts: dict[str, list[socket.socket]] = {}  # where it listens: NODE_IP first (listen_set)
        self._ports = (0, 0)  # the two ports start() bound, for every further address
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pipe = SplicePipe.open() if splice else None  # the pairs' splices pass through it

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "start() the proxy first"
        return self._loop

    def gate_open(self) -> bool:
        if not self.leading:
            return False
        try:
            return bool(self.gate())
        except Exception:  # a gate that cannot answer is a shut gate
            log.exception("the relay gate raised: treated as shut")
            return False

    # -- listening ------------------------------------------------------------------
    async def start(
        self, host: str, port: int, passthrough_port: int | None = None, *, freebind: bool = False
    ) -> None:
        """Listen on `host`: `port` forwards to the external relay's port, `passthrough_port`
        (default `port` + 1) to its passthrough port (``IP_FREEBIND`` if asked: an entry's
        shared VIP). Raises `OSError` if either cannot be bound (then neither listens).
        More addresses: `listen_on()`."""
        self._loop = asyncio.get_running_loop()
        second = port + 1 if passthrough_port is None else passthrough_port
        self._ports = (port, second)
        await self.listen_on(host, freebind=freebind)
        for name, sock in zip(("json", "passthrough"), self._hosts[host], strict=True):
            self.addresses[name] = sock.getsockname()[:2]
        self._ports = (self.addresses["json"][1], self.addresses["passthrough"][1])

    def prepare(self, port: int, passthrough_port: int | None = None) -> None:
        """On the running loop, the ports `listen_now()` binds, with no address listened on yet
        (a station door that listens on `NODE_IP` only, and only while another member leads)."""
        self._loop = asyncio.get_running_loop()
        self._ports = (port, port + 1 if passthrough_port is None else passthrough_port)

    async def listen_on(self, host: str, *, freebind: bool = False) -> None:
        """Listen on one more address (`relay.server.listen_set`: loopback, a held VIP), both
        ports `start()` bound, with ``IP_FREEBIND`` if asked. Raises `OSError` if either
        cannot be bound (then neither listens there); a no-op where it listens already."""
        self._loop = asyncio.get_running_loop()
        self.listen_now(host, freebind=freebind)

    def listen_now(self, host: str, *, freebind: bool = False) -> None:
        """`listen_on()` from a plain callback of the proxy's running loop."""
        if not self.leading:
            raise OSError(errno.EPERM, "this relay no longer leads")
        if host in self._hosts:
            return
        made: list[socket.socket] = []
        try:
            for name, number in (("json", self._ports[0]), ("passthrough", self._ports[1])):
                made.append(self.listen(name, host, number, freebind=freebind))
        except OSError:
            for sock in made:
                self._close_listener(sock)
            raise
        self._hosts[host] = made

    def stop_listening(self, host: str, *, address_left: bool = True) -> None:
        """Stop listening on `host` and, if it is an address that left this host, close the
        connections accepted there: their packets go elsewhere now. (A station door that gives
        its `NODE_IP` port up to this member's relay keeps them: the address stays.)"""
        for sock in self._hosts.pop(host, []):
            self._close_listener(sock)
        if not address_left:
            return
        for pair in list(self.pairs):
            try:
                here = pair.client.getsockname()[0]
            except OSError:
                continue
            if here == host:
                pair.close("address_left")

    def listen(self, name: str, host: str, port: int, *, freebind: bool = False) -> socket.socket:
        """One more listener: connections to `host:port` go to the upstream's port `name`
        (``json`` or ``passthrough``), as `upstream` says when each is accepted."""
        sock = bound_socket(host, port, freebind=freebind)
        try:
            sock.listen(BACKLOG)
        except OSError:
            sock.close()
            raise
        self._listeners.append(sock)
        self.loop.add_reader(sock.fileno(), self._accept, sock, name, host == self.lan_host)
        return sock

    def _close_listener(self, sock: socket.socket) -> None:
        if self._loop is not None:
            self._loop.remove_reader(sock.fileno())
        sock.close()
        if sock in self._listeners:
            self._listeners.remove(sock)

    @property
    def listening_on(self) -> list[str]:
        """Every address with open listeners, the one `start()` bound first."""
        return list(self._hosts)

    @property
    def listening(self) -> bool:
        return bool(self._listeners)

    def close_listeners(self) -> None:
        for sock in list(self._listeners):
            self._close_listener(sock)
        self._hosts.clear()

    def _accept(self, listener: socket.socket, name: str, on_lan: bool = False) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                client, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: the backlog keeps them; look again soon
                log.warning("proxy: accept on %s failed: %s", name, exc.strerror or exc)
                return
            why = self._refusal(peer[0], on_lan)
            held = why == "per_address" and self.header_key is not None and self.holding < self.max_holding
            if why is not None and not held:
                self.refused[why] = self.refused.get(why, 0) + 1
                client.close()
                continue
            try:
                client.setblocking(False)
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                client.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                pair = Pair(self, client, (str(peer[0]), int(peer[1])), name)
            except OSError as exc:  # no descriptor left for its upstream socket (EMFILE), or it reset
                self.refused["no_socket"] = self.refused.get("no_socket", 0) + 1
                log.warning("proxy: cannot forward a connection from %s: %s", peer[0], exc.strerror or exc)
                client.close()
                continue
            self.pairs.add(pair)
            if on_lan:
                self.lan_pairs.add(pair)
            if held:  # maybe a forwarder's burst: its headers, not yet read, may name other clients
                self.holding += 1
                pair.hold(HOLD_S)
            else:
                self.per_address[peer[0]] = self.per_address.get(peer[0], 0) + 1
            self.accepted += 1
            pair.start()

    def _refusal(self, address: str, on_lan: bool = False) -> str | None:
        if not self.gate_open():
            return self._shut()
        if not self.ready() and not self.redial_within:  # with it: the pair waits for the relay
            return "relay_down"
        if len(self.pairs) >= self.max_connections:
            return "total"
        if on_lan and len(self.lan_pairs) >= self.max_lan:
            return "lan_share"
        if self.per_address.get(address, 0) >= self.max_per_address:
            return "per_address"
        return None

    def _shut(self) -> str:
        """A refusal's cause while the gate is shut: the gate's own word for why, if it has one."""
        if not self.leading or self.shut_cause is None:
            return "gate_shut"
        try:
            return self.shut_cause()[:40]
        except Exception:  # a gate that cannot say why is shut all the same
            log.exception("the relay gate's cause raised")
            return "gate_shut"

    @property
    def max_lan(self) -> int:
        """Pairs accepted on `lan_host` may hold at most this many."""
        return max(1, int(self.max_connections * self.lan_share))

    # -- what the runner and the pairs call -------------------------------------------
    def upstream_for(self, port: str) -> tuple[str, int]:
        """Where a pair accepted on `port` (``json`` or ``passthrough``) connects now."""
        return (self.upstream[0], self.upstream[1] if port == "json" else self.upstream_passthrough)

    def counted(self, way: str, sent: int, spliced: bool = False) -> None:
        self.bytes[way] += sent
        if spliced:
            self.spliced += sent

    def forget(self, pair: Pair, cause: str) -> None:
        if pair in self.pairs:
            self.pairs.discard(pair)
            self.lan_pairs.discard(pair)
            if pair.held is not None:
                self.holding -= 1
            elif pair.address is not None:
                self._leave(pair.address)
        self.closes[cause] = self.closes.get(cause, 0) + 1

    def unhold(self, pair: Pair, address: str) -> bool:
        """A held pair (its socket's address was full at the accept) is decided: count it under
        `address` if that address has room now (True), else it is to close (``per_address``)."""
        self.holding -= 1
        if self.per_address.get(address, 0) >= self.max_per_address:
            pair.address = None  # counted nowhere: forget() leaves it
            return False
        self.per_address[address] = self.per_address.get(address, 0) + 1
        pair.address = address
        return True

    def _leave(self, address: str) -> None:
        left = self.per_address.get(address, 1) - 1
        if left > 0:
            self.per_address[address] = left
        else:
            self.per_address.pop(address, None)

    def readdress(self, pair: Pair, client: Address) -> bool:
        """`pair` forwards a client at `client` (its verified header): count it there from now
        on; False (counted ``per_address``) if that address has all the pairs it may have."""
        self.headers["verified"] += 1
        address = admission_address(client, pair.client_address)
        if pair.held is not None:
            if not pair.unhold(address):
                return False
        elif address != pair.address:
            if self.per_address.get(address, 0) >= self.max_per_address:
                return False  # the pair closes, counted ``per_address``
            if pair.address is not None:
                self._leave(pair.address)
            self.per_address[address] = self.per_address.get(address, 0) + 1
            pair.address = address
        pair.peer = f"{address_shown(client)} via {pair.peer}"
        return True

    def header_refused(self, pair: Pair, cause: str, detail: str) -> None:
        """A forwarded-client header that did not verify (the pair closes itself): logged rarely."""
        self.headers["refused"] += 1
        n = self.headers["refused"]
        if n == 1 or n % 100 == 0:  # whoever forges them must not flood the log
            log.warning("proxy: refused a forwarded-client header from %s: %s, %s (%d such refusals)",
                        pair.peer, cause, detail[:120], n)  # fmt: skip

    def no_splice(self, why: OSError) -> None:
        """The kernel refused to splice a pair's sockets: every pair copies from now on."""
        if self.pipe is not None:
            log.warning("proxy: the kernel does not splice these sockets (%s): copying instead",
                        why.strerror or why)  # fmt: skip
            self.pipe.close()
            self.pipe = None

    def repoint(self, upstream: tuple[str, int], passthrough: int | None = None) -> tuple[int, int]:
        """Forward from now on to `upstream` (an entry member's new leader, `relay.server.entry`):
        close every pair forwarded to the old one (its sessions were that relay's), and lead the
        pairs still waiting for an upstream (nothing of them went anywhere) to the new one. How
        many were closed, and how many led on."""
        self.upstream = upstream
        self.upstream_passthrough = upstream[1] + 1 if passthrough is None else passthrough
        closed = led = 0
        for pair in list(self.pairs):
            if pair.waiting:
                pair.redirect()
                led += 1
            else:
                pair.close("repointed")
                closed += 1
        return closed, led

    def close_all(self, cause: str, *, waiting: bool = True) -> int:
        """Close every forwarded connection (the external relay died, or the gate shut), and those
        still waiting for their upstream unless `waiting` is False; how many."""
        pairs = [pair for pair in self.pairs if waiting or not pair.waiting]
        for pair in pairs:
            pair.close(cause)
        return len(pairs)

    def lose_leadership(self, *successor: Any) -> None:
        """The gate is shut for good: no more accepts, every pair closed. A foreign relay
        speaks its own protocol, so no ``leader_changed`` can be said to its clients:
        they see the connection end and reconnect (to the new leader)."""
        self.leading = False
        self.close_listeners()
        self.close_all("gate_shut")
        if self.pipe is not None:
            self.pipe.close()
            self.pipe = None

    async def wait_closed(self, timeout: float = 0.5) -> None:
        """Nothing to wait for: every socket is closed by `lose_leadership()` itself."""
        await asyncio.sleep(0)

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": "exec",
            "listening": {name: list(address) for name, address in self.addresses.items()},
            "upstream": {
                "host": self.upstream[0],
                "json": self.upstream[1],
                "passthrough": self.upstream_passthrough,
            },
            "connections": len(self.pairs),
            "waiting": sum(1 for p in self.pairs if p.waiting),
            "accepted": self.accepted,
            "refused": dict(self.refused),
            "closed": dict(self.closes),
            "bytes_up": self.bytes["up"],
            "bytes_down": self.bytes["down"],
            "bytes_spliced": self.spliced,
            "max_connections": self.max_connections,
            "max_per_address": self.max_per_address,
            "max_lan": self.max_lan,
            "lan_connections": len(self.lan_pairs),
            "headers": dict(self.headers, holding=self.holding),
            "held_bytes": sum(len(p.up.held) + len(p.down.held) for p in self.pairs),
        }
