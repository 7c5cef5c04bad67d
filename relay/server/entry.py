"""An entry member's public side (issue 26 part 1, docs/design.md §14.1): the router's port-forward
reaches this member, and it forwards remote clients to whoever leads now.

`python -m stkrelay.child relay.server.entry` runs on a member with ``ENTRY = 1`` (the supervisor starts it
beside the relay standby, `elections.management.agent_root`). It listens on
`ENTRY_LISTEN` (``port`` protocol v1, ``port + 1`` passthrough; bound with
``IP_FREEBIND``, so a VIP the entry members share may come and go) and forwards raw
TCP, through the same `relay.server.fencing_proxy.FencingProxy` as an external relay, to the relay
of the leader this member's own worker has read (``DATA_DIR/pool.json``: the valid,
unreleased lease's ``ip``, ``port`` and ``epoch``).

- **Gated by the epoch it has read.** The proxy's gate (`EntryGate`, asked before
  every send) is open only while the newest pool view is fresh (written by the
  worker within `stale_after` on this host's monotonic clock) and names a valid,
  unreleased lease of the very epoch and address the proxy forwards to. No leader,
  a stale view, or a released lease: accepts are refused and forwarded pairs closed.
  A lease of an epoch below the highest it forwarded to is no leader either (the
  worker publishes only leases its memory took; this is the second wall, issue 40).
- **Re-point, not splice.** A protocol v1 session is the relay's own (its nonce,
  its HMAC, its session id): it cannot move to another relay under a live TCP
  connection. On a new epoch or address (`target_of` differs), the proxy forwards
  new connections to the new leader and closes those to the old one
  (`FencingProxy.repoint`); the remote client redials the *same* address, the
  entry's, which now leads it to the new leader (docs/cloud.md, "Entry members").
- **The client keeps its address** (issue 40): each connection the proxy opens to the
  relay starts with a keyed PROXY v2 header naming the remote client
  (`relay.wire.proxy_header`, made with the pool key), so the relay's per-address and
  pre-auth caps count each remote client, not this member.
- Where: ``DATA_DIR/entry.json`` (`EntryStatus`), every second: the address, the
  target, the remote sessions (protocol v1 pairs) and streams (passthrough pairs),
  the proxy's counters; the panel, the API and ``relayctl doctor`` show it, and the
  member's heartbeat says ``entry`` (its `ENTRY_LISTEN`).

`target_of` is pure (the view and the clock's reading in, the target out); the loop
looks every `TICK`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from elections.ports.local.localstate import LocalState
from elections.ports.local.pool_view import PoolView, entry_shown
from elections.ports.local.relay_files import EntryStatus
from relay.server.fencing_proxy import FencingProxy
from relay.wire.proxy_header import encode
from stkconfig.model import Config

log = logging.getLogger("stkrelay.relay")

TICK = 0.05  # how often the entry's loop looks at the gate's target (re-points, closes pairs)
CACHE_S = 0.01  # how old the gate's reading of pool.json may be: no leader there shuts it within this
AHEAD_S = 0.5  # a view's `updated` may be this far ahead of the clock read after it (never, on one host)
STATUS_EVERY = 1.0


@dataclass(frozen=True)
class EntryTarget:
    """The leader's relay, as this member's worker last read the lease."""

    epoch: int
    node: str
    ip: str
    port: int


def fresh(view: PoolView, now: float, stale_after: float) -> bool:
    """Was `view` written within `stale_after` of `now`, on this boot's monotonic clock? A view
    more than `AHEAD_S` ahead of `now` is not this boot's (a pool.json the previous boot left, its
    `updated` that boot's reading): stale, however far ahead (tests/test_door_attacks.py)."""
    if view.updated is None:
        return False
    return -AHEAD_S <= now - view.updated <= stale_after


def target_of(view: PoolView, now: float, stale_after: float, floor: int = 0) -> EntryTarget | None:
    """Where remote clients go now, or None (no fresh view, no valid unreleased lease, or one of an
    epoch below `floor`, the highest this entry forwarded to: never back to an older leader)."""
    target = _target_or_cause(view, now, stale_after, floor)
    return target if isinstance(target, EntryTarget) else None


def no_target_cause(view: PoolView, now: float, stale_after: float, floor: int = 0) -> str | None:
    """Why `target_of` names no one (one of `NO_TARGET`), or None when it names a target."""
    target = _target_or_cause(view, now, stale_after, floor)
    return target if isinstance(target, str) else None


# Why the gate is shut (`EntryGate.shut_cause`): the door's and the entry's refusals, by cause.
NO_VIEW, STALE_VIEW, NO_LEADER, RELEASED, OLD_EPOCH, LEADER_CHANGING = (
    "no_view",  # no pool view read (none written yet, or unreadable)
    "stale_view",  # the worker has not written it within `stale_after` (or it is another boot's)
    "no_leader",  # a fresh view names no valid lease
    "released",  # ... or a released one (TTL 0): no one to lead to until the next leader writes
    "old_epoch",  # ... or a lease of an epoch below the highest it forwarded to (issue 40)
    "leader_changing",  # the view names a leader the proxy is not pointed at yet (up to `TICK`)
)
NO_TARGET = (NO_VIEW, STALE_VIEW, NO_LEADER, RELEASED, OLD_EPOCH, LEADER_CHANGING)


def _target_or_cause(view: PoolView, now: float, stale_after: float, floor: int) -> EntryTarget | str:
    if view.updated is None:
        return NO_VIEW
    if not fresh(view, now, stale_after):
        return STALE_VIEW
    lease = view.lease or {}
    if view.lease_status != "valid":
        return NO_LEADER
    if lease.get("released") or lease.get("ttl_s") == 0:
        return RELEASED
    epoch, node, ip, port = lease.get("epoch"), lease.get("node"), lease.get("ip"), lease.get("port")
    if not (isinstance(epoch, int) and isinstance(node, str) and isinstance(ip, str)):
        return NO_LEADER
    if not (isinstance(port, int) and 1 <= port <= 65534):
        return NO_LEADER
    if epoch < floor:
        return OLD_EPOCH
    return EntryTarget(epoch, node, ip, port)


class EntryGate:
    """`gate()` of the entry's proxy: is `target` still what the newest pool view says?"""

    def __init__(
        self,
        read: Callable[[], PoolView],
        stale_after: float,
        cache_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read, self.stale_after, self.cache_s, self.clock = read, stale_after, cache_s, clock
        self.target: EntryTarget | None = None  # what the proxy forwards to
        self._now: EntryTarget | None = None  # what the view said at its last read
        self.view = PoolView()  # the view of its last read
        self._read_at: float | None = None
        self._fresh_until = 0.0  # when the view of that read goes stale: no target from then on
        self.floor = 0  # the highest epoch it read a target of: a lower one is a replay (issue 40)

    def look(self) -> EntryTarget | None:
        """The target the pool view names now (read at most every `cache_s`)."""
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.cache_s:
            try:
                view = self.read()
            except Exception:  # an unreadable view is no leader
                log.exception("entry: cannot read the pool view")
                view = PoolView()
            now = self.clock()  # after the read: a view written since is not ahead of it
            self.view = view
            seen = target_of(view, now, self.stale_after, self.floor)
            if seen != self._now:  # the same target keeps its object: __call__ compares identity first
                self._now = seen
            self._read_at = now
            if seen is not None:
                self.floor = max(self.floor, seen.epoch)
                self._fresh_until = (view.updated or 0.0) + self.stale_after
        elif self._now is not None and now > self._fresh_until:  # stale between two reads
            self._now = None
        return self._now

    def shut_cause(self) -> str:
        """Why the gate is shut now (one of `NO_TARGET`): asked at a refused accept only, never on
        the send path. A view gone stale between two reads is a stale view, as `look` says."""
        seen = self.look()
        if seen is not None:
            return LEADER_CHANGING
        return no_target_cause(self.view, self.clock(), self.stale_after, self.floor) or STALE_VIEW

    def __call__(self) -> bool:
        """Asked before every send (a pair's callback): cheap, with nothing awaited."""
        target = self.target
        if target is None:
            return False
        seen = self.look()
        return seen is target or seen == target


class EntryRunner:
    """The entry's proxy, its gate and its status file, on one event loop (the station door,
    `relay.server.station_door`, is one on this member's own addresses)."""

    what = "entry"  # in its log lines

    def __init__(
        self,
        data_dir: str,
        listen: tuple[str, int],
        stale_after: float,
        max_per_address: int = 0,
        pool_key: str = "",
        redial_within: float = 0.0,
        header_key: str | None = None,
        lan_host: str | None = None,
        lan_share: float = 1.0,
    ) -> None:
        self.local = LocalState(data_dir)
        self.listen = listen
        self.gate = EntryGate(self.local.pool, stale_after)
        header = functools.partial(encode, key=pool_key) if pool_key else None  # the client's address
        self.proxy = FencingProxy(gate=self.gate, upstream=("127.0.0.1", 1), max_per_address=max_per_address,
                                  forward_header=header, header_key=header_key, redial_within=redial_within,
                                  held_back=self.held_back, lan_host=lan_host, lan_share=lan_share,
                                  shut_cause=self.gate.shut_cause)  # fmt: skip
        self.repointed = 0
        self.error = ""
        self._stop = asyncio.Event()

    def shown(self) -> str:
        return entry_shown(self.listen)

    def held_back(self) -> bool:
        """Should a new connection wait before it dials the leader? (None here; the door's own.)"""
        return False

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        try:
            await self.start_listening()
        except OSError as exc:
            self.error = f"cannot listen on {self.shown()}: {exc.strerror or exc}"
            log.error("%s: %s", self.what, self.error)
            self.write_status()
            return 1
        log.info("%s: listening on %s", self.what, self.shown())
        written = 0.0
        while not self._stop.is_set():
            self.follow()
            if time.monotonic() - written >= STATUS_EVERY:
                self.write_status()
                written = time.monotonic()
            try:
                async with asyncio.timeout(TICK):
                    await self._stop.wait()
            except TimeoutError:
                pass
        self.proxy.lose_leadership()
        self.write_status()
        return 0

    async def start_listening(self) -> None:
        await self.proxy.start(*self.listen, freebind=True)  # a VIP the entry members share may come later

    def follow(self) -> None:
        """Re-point the proxy when the lease it has read names another epoch or relay."""
        now = self.gate.look()
        if now == self.gate.target:
            return
        if now is None:  # no leader read: the gate is shut; nothing is forwarded to anyone
            # Those still waiting for an upstream went nowhere: they wait out their own bound (a
            # takeover may leave the lease unreadable for a moment), new ones are refused at once.
            closed = self.proxy.close_all("no_leader", waiting=False)
            log.info("%s: no leader in the pool view; %d connection(s) closed", self.what, closed)
            self.gate.target = None
            return
        closed, led = self.proxy.repoint((now.ip, now.port))
        if self.gate.target is not None:
            self.repointed += 1
        waiting = f", {led} waiting led there" if led else ""
        log.info("%s: forwarding to %s (%s:%d, epoch %d); %d connection(s) to the old leader closed%s",
                 self.what, now.node, now.ip, now.port, now.epoch, closed, waiting)  # fmt: skip
        self.gate.target = now

    def snapshot(self) -> EntryStatus:
        pairs = list(self.proxy.pairs)
        target = self.gate.target
        return EntryStatus(
            pid=os.getpid(), listen=self.shown(), listening=self.proxy.listening, updated=time.monotonic(),
            target=asdict(target) if target is not None and self.gate() else None,
            sessions=sum(1 for p in pairs if p.port == "json"),
            streams=sum(1 for p in pairs if p.port == "passthrough"),
            repointed=self.repointed, proxy=self.proxy.snapshot(), error=self.error,
        )  # fmt: skip

    def write_status(self) -> None:
        try:
            self.local.write_entry(self.snapshot())
        except OSError as exc:
            log.warning("entry: cannot write entry.json in %s: %s", self.local.dir, exc)


def stale_after(lease_poll: float, lease_ttl: float) -> float:
    """How old a pool view may be and still lead remote clients: a few of the worker's
    looks, never past the lease's TTL."""
    return min(max(4 * lease_poll, 2.0), lease_ttl)


def main(stk: Config, argv: list[str] | None = None) -> int:
    """`python -m stkrelay.child relay.server.entry`: the entry member's public side, with the
    configuration `stkrelay.child` loaded."""
    if not stk.entry or stk.entry_listen is None:
        print(f"entry: {stk.node} is no entry member (ENTRY = 0): nothing to do", flush=True)
        return 0
    runner = EntryRunner(stk.data_dir, stk.entry_listen, stale_after(stk.lease_poll, stk.lease_ttl),
                         stk.relay_max_per_address, pool_key=stk.pool_key)  # fmt: skip
    return asyncio.run(runner.run())
