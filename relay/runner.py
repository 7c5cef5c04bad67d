"""The relay's TCP listeners while this agent leads, without Django (DESIGN.md §4).

`python -m stkrelay.child relay.runner --standby` is the agent's warm standby relay: it
loads only the configuration (`stkrelay.config`, in `stkrelay.child`), the relay server and the
ports it needs (no Django, no Celery: a few MiB where a management command
costs ~75), waits for this agent's leadership and the fenced start_relay
action of its epoch, and serves until leadership is lost (see
`relay.management.commands.runrelay`, the same behaviour as a management
command). With ``CLOUD_URL`` set, it dials the cloud relay's tunnel as soon
as it serves (`relay.server.cloud_tunnel.TunnelClient`, presenting the signed lease of
its epoch), redials with backoff while the gate holds, and closes it on the
way out; its state is ``snapshot["tunnel"]`` in relay.json. It listens on
`NODE_IP`, on 127.0.0.1 (`RELAY_LOOPBACK`) and on every address an executor
holds for its epoch (`relay.server.listen_set`, from addresses.json, watched like
leadership.json); where, is ``snapshot["listen"]``. With
``RELAY_KIND = exec`` it serves the site's own relay instead (DESIGN.md §16):
the external relay (`relay.server.external_relay`) on loopback, behind the fencing proxy
(`relay.server.fencing_proxy`) on the same addresses and gate; relay.json says it listens
only while the external relay accepts. Exit status: 0
after serving, 1 if a port cannot be bound, 2 on a configuration problem.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from elections.ports.clock import SystemClock
from elections.ports.host.dirwatch import DirWatch
from elections.ports.localstate import (
    ADDRESSES_NAME,
    LEADERSHIP_NAME,
    RELAY_WANTED_NAME,
    Leadership,
    LocalState,
    RelayStatus,
)
from elections.ports.stores import PoolPlace, open_store
from relay.server.binding_feed import BindingFeed
from relay.server.bindings import StationBindings
from relay.server.cloud_tunnel import TunnelClient
from relay.server.external_relay import ExternalRelay
from relay.server.fencing_proxy import FencingProxy
from relay.server.listen_set import ListenAddress, ListenSet, wanted_now
from relay.server.relay_server import RelayServer
from relay.wire.auth import cloud_key
from relay.wire.legacy import LegacySettings
from stkconfig.model import Config

log = logging.getLogger("stkrelay.relay")

TICK = 0.1  # the serving loop's look without inotify
LOOK_EVERY = 0.5  # with it: a look this often even if no change was announced (the worker's pid)
STANDBY_POLL = 0.05  # without inotify
STANDBY_FALLBACK = 1.0  # with it: a look this often even if no change was announced
STATUS_EVERY = 1.0  # relay.json; the panel calls a status older than 3 s stale
LEASE_READ_WITHIN = 0.5
Successor = tuple[int | None, str | None, int | None]
NOBODY: Successor = (None, None, None)


class LeadershipGate:
    """`gate()` of the relay: does this agent still lead, with `epoch`?

    The state file is read at most every `cache_s`; the deadline in it is
    compared with the clock at every call.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        epoch: int,
        cache_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.local, self.epoch, self.cache_s, self.clock = LocalState(data_dir), epoch, cache_s, clock
        self._state = Leadership()
        self._pid_ok = False
        self._read_at: float | None = None

    def _refresh(self, now: float) -> None:
        if self._read_at is not None and now - self._read_at < self.cache_s:
            return
        self._state = self.local.leadership()
        self._pid_ok = self._state.worker_alive()
        self._read_at = now

    def why_not(self, fresh: bool = False) -> str | None:
        """None while this agent leads with `epoch`; else the reason, for the log.
        `fresh`: read the state file now, whatever the cache says."""
        now = self.clock()
        if fresh:
            self._read_at = None
        self._refresh(now)
        state = self._state
        if not state.leader:
            return "the leadership state says this agent is not the leader"
        if not state.leads_now(now):
            return "the renew deadline in the leadership state has passed"
        if state.epoch != self.epoch:
            return f"the epoch changed from {self.epoch} to {state.epoch}"
        if not self._pid_ok:
            return f"the lease worker (pid {state.pid}) is gone"
        return None

    def __call__(self) -> bool:
        return self.why_not() is None

    def successor(self) -> tuple[int, str, int] | None:
        """(epoch, ip, port) of the member this agent handed its lease to, as the leadership
        state says once this agent no longer leads (read now: the gate has just shut)."""
        self._read_at = None
        self._refresh(self.clock())
        state, named = self._state, self._state.successor
        if state.leader or named is None or named[0] <= self.epoch:
            return None
        return named

    def deadline(self) -> float | None:
        """The renew deadline (monotonic) in the state last read, if it says this agent leads."""
        state = self._state
        return state.valid_until if state.leader else None


class LeadershipChanges:
    """The serving loop's wait: until the worker replaces leadership.json or
    addresses.json (inotify, on the event loop), a stop, or a timeout."""

    def __init__(self, loop: asyncio.AbstractEventLoop, data_dir: str | os.PathLike[str]) -> None:
        self.loop = loop
        self.changed = asyncio.Event()
        self.watch = DirWatch(data_dir, (LEADERSHIP_NAME, ADDRESSES_NAME))
        if self.watch.fd is not None:
            loop.add_reader(self.watch.fd, self._readable)

    @property
    def watching(self) -> bool:
        return self.watch.watching

    def _readable(self) -> None:
        if self.watch.drain():
            self.changed.set()
        if self.watch.ended:  # the data directory went away: polling from now on
            self._unwatch()

    def _unwatch(self) -> None:
        if self.watch.fd is not None:
            self.loop.remove_reader(self.watch.fd)
            self.watch.close()

    async def wait(self, stopping: asyncio.Event, timeout: float) -> None:
        if not (self.changed.is_set() or stopping.is_set()):
            waiters = {asyncio.ensure_future(self.changed.wait()), asyncio.ensure_future(stopping.wait())}
            _, pending = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()
        self.changed.clear()

    def __enter__(self) -> LeadershipChanges:
        return self

    def __exit__(self, *_: object) -> None:
        self._unwatch()


def await_leadership(stk: Config) -> int:
    """Look at the leadership state and the relay marker whenever the worker
    replaces one of them (inotify on the data directory), at least every
    STANDBY_FALLBACK, or every STANDBY_POLL where inotify is not to be had. The
    imports are done, so the listeners are up within ~0.1 s of the action, and
    an idle standby costs no wakeups."""
    local = LocalState(stk.data_dir)
    with DirWatch(stk.data_dir, (LEADERSHIP_NAME, RELAY_WANTED_NAME)) as changes:
        every = STANDBY_FALLBACK if changes.watching else STANDBY_POLL
        while True:
            epoch = local.leadership().held_epoch(time.monotonic())
            if (
                epoch is not None and local.relay_wanted() == epoch
                and LeadershipGate(stk.data_dir, epoch).why_not() is None
            ):  # fmt: skip
                return epoch
            changes.wait(every)


def legacy_settings(stk: Config) -> LegacySettings | None:
    """Old stations on this relay (``RELAY_LEGACY = 1``, relay.wire.legacy), or None."""
    if not getattr(stk, "relay_legacy", False):
        return None
    return LegacySettings(stk.relay_legacy_magic, stk.relay_legacy_wait)


class RelayRunner:
    """Serve while the gate holds; on losing it, redirect clients and return 0."""

    def __init__(self, stk: Config, epoch: int, say: Callable[[str], None], complain: Callable[[str], None]):
        self.stk, self.epoch, self.say, self.complain = stk, epoch, say, complain
        self.gate = LeadershipGate(stk.data_dir, epoch)
        self.local = LocalState(stk.data_dir)
        self.bindings = StationBindings()
        self.external: ExternalRelay | None = None
        self.server: RelayServer | FencingProxy
        self.tunnel: TunnelClient | None = None
        if stk.relay_kind == "exec" and stk.relay_exec is not None:
            self.server = self.fencing_proxy()
        else:
            self.server = self.builtin_relay()
        # NODE_IP, loopback, and the addresses the executors hold for this epoch (relay.server.listen_set).
        self.listen = ListenSet.of(self.server)

    def builtin_relay(self) -> RelayServer:
        stk = self.stk
        return RelayServer(
            node=stk.node,
            kmsn=stk.kmsn,
            token=stk.relay_token,
            gate=self.gate,
            epoch=self.epoch,
            max_frame=stk.relay_max_frame,
            keepalive=stk.relay_keepalive,
            pool_key=stk.pool_key,
            station_keys_only=stk.relay_station_keys_only,
            max_per_address=stk.relay_max_per_address or None,
            bindings=self.bindings,
            legacy=legacy_settings(stk),
        )

    def wanted(self) -> tuple[ListenAddress, ...]:
        stk = self.stk
        return wanted_now(self.local, stk.node_ip, stk.relay_loopback, self.epoch)

    def fencing_proxy(self) -> FencingProxy:
        """RELAY_KIND = exec: the proxy, fenced by this runner's gate, in front of the external relay."""
        spec = self.stk.relay_exec
        proxy = FencingProxy(gate=self.gate, upstream=(spec.host, spec.port),
                             upstream_passthrough=spec.passthrough_port,
                             ready=lambda: external.accepting,
                             max_per_address=self.stk.relay_max_per_address or None)  # fmt: skip

        def changed(why: str | None) -> None:
            if why is not None:  # it went away: so did every connection through it
                proxy.close_all(why)
            self.write_status(True)

        external = ExternalRelay(spec, epoch=self.epoch, kmsn=self.stk.kmsn, say=self.say,
                                 on_up=lambda: changed(None), on_down=changed)  # fmt: skip
        self.external = external
        return proxy

    def serving(self) -> bool:
        """The built-in relay serves once it listens; an external relay once it accepts too."""
        return self.external is None or self.external.accepting

    async def run(self) -> int:
        stk, server = self.stk, self.server
        loop = asyncio.get_running_loop()
        feed = BindingFeed(loop, stk.data_dir, self.bindings).start()
        await feed.first()  # the pool's bindings before the first client (read off the loop)
        try:
            await server.start(stk.node_ip, stk.relay_port)
        except OSError as exc:
            feed.stop()
            self.complain(
                f"runrelay: cannot listen on {stk.node_ip}:{stk.relay_port} and :{stk.relay_port + 1}: "
                f"{exc.strerror or exc}"
            )
            return 1
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        through = ""
        if self.external is not None:
            through = f" through the fencing proxy to {self.external.name} on {stk.relay_exec.host}"
            self.external.start()
        self.say(
            f"runrelay: {stk.node} epoch {self.epoch} serving {stk.kmsn} on {stk.node_ip}:"
            f"{stk.relay_port} (json) and :{stk.relay_port + 1} (passthrough){through}"
        )
        if stk.cloud is not None:
            self.tunnel = TunnelClient(server=server, host=stk.cloud.host, port=stk.cloud.port,
                                       token=stk.cloud_token, lease_key=cloud_key(stk.pool_key, stk.kmsn),
                                       kmsn=stk.kmsn, node=stk.node, epoch=self.epoch,
                                       lease=self.own_lease, gate=self.gate, keepalive=stk.relay_keepalive,
                                       also=[(u.host, u.port) for u in stk.clouds[1:]])  # fmt: skip
            self.tunnel.start()
        with LeadershipChanges(loop, stk.data_dir) as changes:  # watching addresses.json from here on
            await self.listen.reconcile(self.wanted())
            also = [f"{s['address']} ({s['why']}, {s['state']})" for s in self.listen.snapshot()[1:]]
            if also:
                self.say(f"runrelay: also on {', '.join(also)}")
            self.write_status(True)
            next_status = loop.time() + STATUS_EVERY
            while True:
                await changes.wait(stopping, self.next_look(loop.time(), next_status, changes.watching))
                if stopping.is_set():
                    reason, successor = "stopped by signal", NOBODY
                    break
                why = self.gate.why_not(fresh=True)
                if why is not None:
                    reason, successor = f"lost leadership: {why}", await self.successor()
                    break
                moved = await self.listen.reconcile(self.wanted())
                if moved or loop.time() >= next_status:
                    self.write_status(True)
                    next_status = loop.time() + STATUS_EVERY
        told = server.snapshot()["connections"]
        server.lose_leadership(*successor)  # closes every listener, on every address
        self.write_status(False)  # at once: a handing-off worker waits for this before it writes the handoff
        self.listen.forget()
        await server.wait_closed(0.5)
        if self.external is not None:
            await self.external.stop()
        feed.stop()
        if self.tunnel is not None:
            await self.tunnel.stop()
        self.write_status(False)
        epoch, ip, port = successor
        self.say(f"runrelay: {reason}; told {told} connections epoch={epoch} ip={ip} port={port}; exiting")
        return 0

    def next_look(self, now: float, next_status: float, watching: bool) -> float:
        """Seconds until the loop must look again by itself: at the renew
        deadline in the leadership state (to the millisecond: the gate closes
        then, not a tick later), at the next status write, and at least every
        LOOK_EVERY (the worker's pid). A change of the state wakes it sooner."""
        if not watching:
            return TICK
        until = min(next_status - now, LOOK_EVERY)
        deadline = self.gate.deadline()
        if deadline is not None:
            until = min(until, deadline - now + 0.001)
        return max(until, 0.0)

    async def read_lease(self, within: float = LEASE_READ_WITHIN) -> Any:
        """The lease read off-loop (a dead share may hang), within `within` seconds; raises if not."""
        return await self.off_loop(lambda store: store.read(), within)

    async def off_loop(self, read: Callable[[Any], Any], within: float = LEASE_READ_WITHIN) -> Any:
        """`read(store)` on a daemon thread of its own (a dead share may hang it: the
        relay still exits), within `within` seconds; raises if not."""
        stk = self.stk
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(read(open_store(PoolPlace.of(stk), stk.node, SystemClock())))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=run, name="lease-read", daemon=True).start()
        return await asyncio.wait_for(asyncio.wrap_future(future), within)

    async def own_lease(self) -> dict[str, Any] | None:
        """The signed lease naming this node with this epoch, as the tunnel presents it; or None."""
        try:
            lease = await self.read_lease(self.stk.share_timeout + 0.5)
        except Exception as exc:
            log.warning("cannot read the lease for the cloud tunnel: %s", exc or type(exc).__name__)
            return None
        record = lease.record
        if lease.status != "valid" or record is None or record.released:
            return None
        if record.node != self.stk.node or record.epoch != self.epoch:
            return None
        return json.loads(record.encode(self.stk.pool_key))

    async def successor(self) -> Successor:
        """The new leader from the lease, read off-loop (a dead share may hang): or nulls.
        A lease this node released with a handoff names its target, not yet its holder:
        the target's address (its member record) with the next epoch, which only the
        target may take at once. A claim for the clients to try first (a hint they
        drop after a few tries), fenced by the target's own gate like any other."""
        named = self.gate.successor()
        if named is not None:  # a handoff this agent wrote: no read of the share needed
            return named
        try:
            lease = await self.read_lease()
        except Exception as exc:
            log.warning("cannot read the lease to name the new leader: %s", exc or type(exc).__name__)
            return NOBODY
        record = lease.record
        if lease.status != "valid" or record is None:
            return NOBODY
        if record.released and record.node == self.stk.node and record.epoch == self.epoch:
            return await self.handoff_target(record.handoff_to, record.epoch + 1)
        if record.released or record.node == self.stk.node or record.epoch <= self.epoch:
            return NOBODY
        return record.epoch, record.ip, record.port

    async def handoff_target(self, node: str | None, epoch: int) -> Successor:
        if not node or node == self.stk.node:
            return NOBODY

        def member_ip(store: Any) -> str | None:
            read_one = getattr(store, "read_member", None)
            doc = read_one(node) if read_one is not None else store.read_members().get(node)
            ip = (doc or {}).get("ip")
            return ip if isinstance(ip, str) and ip else None

        try:
            ip = await self.off_loop(member_ip)
        except Exception as exc:
            log.warning("cannot read %s's member record to name it: %s", node, exc or type(exc).__name__)
            return NOBODY
        return (epoch, ip, self.stk.relay_port) if ip else NOBODY

    def write_status(self, listening: bool) -> None:
        snapshot = self.server.snapshot()
        if self.tunnel is not None:
            snapshot["tunnel"] = self.tunnel.snapshot()
        snapshot["listen"] = self.listen.snapshot()
        if self.external is not None:
            snapshot["external"] = self.external.snapshot()
        status = RelayStatus(
            os.getpid(), self.epoch, listening and self.serving(), time.monotonic(), snapshot
        )
        try:
            self.local.write_relay(status)
        except OSError as exc:
            log.warning("cannot write the relay status in %s: %s", self.local.dir, exc)


def main(stk: Config, argv: list[str] | None = None) -> int:
    """`python -m stkrelay.child relay.runner --standby`: the standby relay, with the
    configuration `stkrelay.child` loaded."""
    import argparse

    parser = argparse.ArgumentParser(prog="relay.runner", description=__doc__.splitlines()[0])
    parser.add_argument("--standby", action="store_true", help="wait for leadership, then serve")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    def complain(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.standby:
        epoch = await_leadership(stk)
    else:
        epoch = LocalState(stk.data_dir).leadership().held_epoch(time.monotonic())
        why = "the leadership state does not say this agent leads now" if epoch is None else None
        why = why or LeadershipGate(stk.data_dir, epoch).why_not()  # type: ignore[arg-type]
        if why is not None:
            say(f"runrelay: {stk.node} is not the leader ({why}): not serving")
            return 0
    assert isinstance(epoch, int)
    return asyncio.run(RelayRunner(stk, epoch, say, complain).run())
