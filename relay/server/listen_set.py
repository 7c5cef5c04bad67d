"""The addresses the relay listens on right now, and the listeners that follow them.

A leader's relay does not listen on `NODE_IP` alone (issue 19, ADR 0011's L3
continuity, seed 000 §3.6):

- ``node``: `NODE_IP`, always; serving without it is not serving (`required`).
- ``loopback``: ``127.0.0.1``, so that the leader's own agent can dial
  ``127.0.0.1:RELAY_PORT``. `RELAY_LOOPBACK` = ``auto`` (default: unless
  `NODE_IP` is a loopback address itself, as on a test machine where several
  agents share loopback, each on its own ``127.0.0.x``), ``on`` or ``off``.
- ``vip`` / ``secondary_ip``: every address an executor holds for this
  leader's epoch (`DATA_DIR/addresses.json`, kept by
  `elections.executors.held`), bound with ``IP_FREEBIND`` where the platform has
  it, so the listener may come up before the kernel has the address (a cloud's
  secondary IP that the OS picks up later, an IPv6 address still tentative);
  elsewhere the bind is retried until the address has arrived. An entry of
  another epoch is not served.

With `NODE_IP` a wildcard (``0.0.0.0``, ``::``) that one listener covers every
address, and nothing else is wanted.

`wanted()` says which addresses (pure); `ListenSet` makes the listeners match
(`reconcile()`, called at every look of its owner), through two callables of
its owner: `open(address)` binds every port the owner serves on
``address.host`` (raising `OSError`, then nothing of that host is left bound),
and `close(host)` closes them and the connections accepted there. The relay
(`relay.server.relay_server.RelayServer.listen_on` / `stop_listening`) and the fencing proxy
of an external relay are such owners. A failed bind is kept, shown, and
retried at the next reconcile; its log line is written once per new error.

    listen = ListenSet.of(server)   # anything with listen_on(host, freebind=) and stop_listening(host)
    await listen.reconcile(wanted_now(local, stk.node_ip, stk.relay_loopback, epoch))
    snapshot["listen"] = listen.snapshot()   # relay.json: the panel, the API, relayctl doctor
    listen.close_all()

`bound_socket()` is the socket an owner hands to ``loop.create_server(sock=...)``.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from elections.ports.local.localstate import LocalState
from elections.ports.local.relay_files import HeldAddress

log = logging.getLogger("stkrelay.relay")

LOOPBACK = "127.0.0.1"
LOOPBACK_MODES = ("auto", "on", "off")
# Linux's IP_FREEBIND (Python 3.11's socket module lacks the name on some builds).
IP_FREEBIND: int | None = getattr(socket, "IP_FREEBIND", 15 if sys.platform.startswith("linux") else None)
LISTENING, WAITING, FAILED = "listening", "waiting", "failed"


@dataclass(frozen=True)
class ListenAddress:
    host: str
    why: str  # "node" | "loopback" | "vip" | "secondary_ip"
    required: bool = False  # the owner does not serve without it
    freebind: bool = False  # bind even if the address is not (yet) on this host


def wanted(
    node_ip: str, loopback: str, held: Iterable[HeldAddress], epoch: int | None
) -> tuple[ListenAddress, ...]:
    """The addresses to listen on: `NODE_IP`, loopback (`loopback` a mode of
    `LOOPBACK_MODES`), and the held addresses of `epoch`, each once."""
    node = ListenAddress(node_ip, "node", required=True)
    ip = ipaddress.ip_address(node_ip)
    if ip.is_unspecified:
        return (node,)
    out = [node]
    if loopback == "on" or (loopback == "auto" and not ip.is_loopback):
        out.append(ListenAddress(LOOPBACK, "loopback"))
    for h in held:
        if h.epoch == epoch:
            out.append(ListenAddress(h.address, h.kind, freebind=True))
    seen: set[str] = set()
    unique = []
    for address in out:
        if address.host not in seen:
            seen.add(address.host)
            unique.append(address)
    return tuple(unique)


def loopback_listened(node_ip: str, loopback: str) -> bool:
    """Whether this member takes connections on ``127.0.0.1`` at all (`RELAY_LOOPBACK`)."""
    ip = ipaddress.ip_address(node_ip)
    return not ip.is_unspecified and (loopback == "on" or (loopback == "auto" and not ip.is_loopback))


def door_hosts(node_ip: str, loopback: str, forward: str) -> tuple[str, ...]:
    """Where this member's station door listens (`relay.server.station_door`, `RELAY_FORWARD`):
    ``127.0.0.1`` where a loopback listener is wanted at all, and with ``lan`` `NODE_IP` too
    (given up while this member leads: its relay listens there). Empty: no door."""
    if forward == "off":
        return ()
    out = [LOOPBACK] if loopback_listened(node_ip, loopback) else []
    ip = ipaddress.ip_address(node_ip)
    if forward == "lan" and not ip.is_unspecified and not ip.is_loopback:
        out.append(node_ip)
    return tuple(out)


def relay_loopback(node_ip: str, loopback: str, forward: str) -> str:
    """The `RELAY_LOOPBACK` mode the relay itself uses: ``off`` where the station door holds
    ``127.0.0.1`` (on every member, the leader's too, so the port is never unbound on a change
    of role); else `loopback` unchanged."""
    return "off" if LOOPBACK in door_hosts(node_ip, loopback, forward) else loopback


def wanted_now(
    local: LocalState, node_ip: str, loopback: str, epoch: int | None
) -> tuple[ListenAddress, ...]:
    """`wanted()` with the held addresses as `DATA_DIR/addresses.json` says now."""
    return wanted(node_ip, loopback, local.held_addresses(), epoch)


def bound_socket(host: str, port: int, *, freebind: bool = False) -> socket.socket:
    """A non-blocking TCP socket bound to (host, port), not listening yet, with
    ``SO_REUSEADDR`` (POSIX), IPv6-only for an IPv6 host, and ``IP_FREEBIND``
    if asked and the platform has it. Raises `OSError` (the socket closed)."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a name: its first address
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, *_, where = found[0]
        host = str(where[0])
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if os.name == "posix":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if freebind and IP_FREEBIND is not None:
            try:
                sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
            except OSError:  # not for this family here: the bind waits for the address instead
                pass
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class _State:
    address: ListenAddress
    state: str
    since: float
    error: str = ""


class Listener(Protocol):
    """An owner of listeners: the relay server, the fencing proxy."""

    async def listen_on(self, host: str, *, freebind: bool = False) -> None: ...  # OSError: none bound

    def stop_listening(self, host: str) -> None: ...  # and close what was accepted there


class ListenSet:
    """The owner's listeners, made to match the wanted addresses at each `reconcile()`."""

    @classmethod
    def of(cls, owner: Listener, clock: Callable[[], float] = time.monotonic) -> ListenSet:
        async def open_(address: ListenAddress) -> None:
            await owner.listen_on(address.host, freebind=address.freebind)

        return cls(open_, owner.stop_listening, clock)

    def __init__(
        self,
        open: Callable[[ListenAddress], Awaitable[None]],
        close: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open, self._close, self.clock = open, close, clock
        self._states: dict[str, _State] = {}

    @property
    def hosts(self) -> list[str]:
        """The hosts listened on now."""
        return [h for h, s in self._states.items() if s.state == LISTENING]

    def failed_required(self) -> list[_State]:
        return [s for s in self._states.values() if s.address.required and s.state != LISTENING]

    async def reconcile(self, addresses: Sequence[ListenAddress]) -> bool:
        """Close what is no longer wanted, then open (or retry) what is. True
        if the listeners changed (one opened or closed)."""
        wanted_hosts = {a.host: a for a in addresses}
        changed = False
        for host in [h for h in self._states if h not in wanted_hosts]:
            state = self._states.pop(host)
            if state.state == LISTENING:
                self._close(host)
                changed = True
                log.info("relay: no longer listening on %s (%s)", host, state.address.why)
        for address in addresses:
            known = self._states.get(address.host)
            if known is not None and known.state == LISTENING:
                known.address = address
                continue
            try:
                await self._open(address)
            except OSError as exc:
                self._failed(address, known, exc)
            else:
                self._states[address.host] = _State(address, LISTENING, self.clock())
                changed = True
                log.info("relay: listening on %s (%s)", address.host, address.why)
        return changed

    def _failed(self, address: ListenAddress, before: _State | None, exc: OSError) -> None:
        kind = WAITING if exc.errno == errno.EADDRNOTAVAIL else FAILED
        error = exc.strerror or str(exc) or type(exc).__name__
        if before is None or before.error != error:
            what = "waiting for the address" if kind == WAITING else "cannot listen"
            log.warning("relay: %s on %s (%s): %s; retrying", what, address.host, address.why, error)
        since = before.since if before is not None and before.error == error else self.clock()
        self._states[address.host] = _State(address, kind, since, error)

    def forget(self) -> None:
        """Drop every state without closing anything (the owner closed every listener itself)."""
        self._states.clear()

    def close_all(self) -> None:
        for host, state in list(self._states.items()):
            if state.state == LISTENING:
                self._close(host)
        self._states.clear()

    def snapshot(self) -> list[dict[str, Any]]:
        """One entry per wanted address (relay.json's ``listen``), in the order wanted."""
        now = self.clock()
        return [
            {"address": h, "why": s.address.why, "state": s.state, "for_s": round(now - s.since, 1),
             "error": s.error}
            for h, s in self._states.items()
        ]  # fmt: skip
