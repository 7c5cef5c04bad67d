"""Serving while the gate holds: the relay server or fencing proxy, listeners, relay.json."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import time
from collections.abc import Callable

from elections.ports.local.localstate import (
    LocalState,
    RelayStatus,
)
from relay.runner.gate import LeadershipChanges, LeadershipGate
from relay.runner.lease_reads import NOBODY, PoolReads, Successor
from relay.runner.snapshot_bound import bounded
from relay.server.binding_feed import BindingFeed
from relay.server.bindings import StationBindings
from relay.server.cloud_tunnel import TunnelClient
from relay.server.external_relay import ExternalRelay
from relay.server.fencing_proxy import FencingProxy
from relay.server.listen_set import ListenAddress, ListenSet, relay_loopback, wanted_now
from relay.server.relay_server import RelayServer
from relay.wire.legacy import LegacySettings
from stkconfig.model import Config
from stkhost.pool_keys import cloud_key

log = logging.getLogger("stkrelay.relay")

TICK = 0.1  # the serving loop's look without inotify
LOOK_EVERY = 0.5  # with it: a look this often even if no change was announced (the worker's pid)
STATUS_EVERY = 1.0  # relay.json; the panel calls a status older than 3 s stale
# Seconds a connection accepted while the external relay does not accept yet (starting after this
# member won, or restarting) waits for it before it is closed.
WAIT_FOR_RELAY = 2.0
BIND_WAIT = 1.0  # seconds a NODE_IP bind is tried again while this member's station door lets go of it


def legacy_settings(stk: Config) -> LegacySettings | None:
    """Old stations on this relay (``RELAY_LEGACY = 1``, relay.wire.legacy), or None."""
    if not stk.relay_legacy:
        return None
    return LegacySettings(stk.relay_legacy_magic, stk.relay_legacy_wait)


class RelayRunner:
    """Serve while the gate holds; on losing it, redirect clients and return 0."""

    def __init__(
        self,
        stk: Config,
        epoch: int,
        say: Callable[[str], None],
        complain: Callable[[str], None],
        warm: ExternalRelay | None = None,
    ):
        self.stk, self.epoch, self.say, self.complain = stk, epoch, say, complain
        self.warm = warm  # RELAY_KIND = exec: the external relay the standby started already
        self.gate = LeadershipGate(stk.data_dir, epoch)
        self.reads = PoolReads(stk, epoch, self.gate)  # the lease and the successor, off the loop
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
            successor=self.gate.successor,
        )

    def wanted(self) -> tuple[ListenAddress, ...]:
        stk = self.stk
        loopback = relay_loopback(stk.node_ip, stk.relay_loopback, stk.relay_forward)
        return wanted_now(self.local, stk.node_ip, loopback, self.epoch)

    def fencing_proxy(self) -> FencingProxy:
        """RELAY_KIND = exec: the proxy, fenced by this runner's gate, in front of the external relay."""
        spec = self.stk.relay_exec
        assert spec is not None  # RELAY_KIND = exec: the config has its command (stkconfig.relay_kind)
        # A forwarded client's header (issue 40) is checked with the pool key and stripped.
        proxy = FencingProxy(gate=self.gate, upstream=(spec.host, spec.port),
                             upstream_passthrough=spec.passthrough_port,
                             ready=lambda: external.accepting, redial_within=WAIT_FOR_RELAY,
                             max_per_address=self.stk.relay_max_per_address or None,
                             header_key=self.stk.pool_key)  # fmt: skip

        def changed(why: str | None) -> None:
            if why is not None:  # it went away: so did every connection through it
                proxy.close_all(why)
            self.write_status(True)

        if self.warm is not None:  # started before this member led: it accepts already
            external = self.warm
            external.epoch, external.on_up, external.on_down = self.epoch, lambda: changed(None), changed
        else:
            external = ExternalRelay(spec, epoch=self.epoch, kmsn=self.stk.kmsn, say=self.say,
                                     on_up=lambda: changed(None), on_down=changed)  # fmt: skip
        self.external = external
        return proxy

    def serving(self) -> bool:
        """The built-in relay serves once it listens; an external relay once it accepts too."""
        return self.external is None or self.external.accepting

    async def run(self) -> int:
        stk = self.stk
        loop = asyncio.get_running_loop()
        feed = BindingFeed(loop, stk.data_dir, self.bindings).start()
        await feed.first()  # the pool's bindings before the first client (read off the loop)
        try:
            await self.start_listening()
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
            spec = stk.relay_exec
            through = f" through the fencing proxy to {self.external.name} on {spec.host if spec else '?'}"
            if self.external.started:
                through += f" (warm: started by the standby, pid {self.external.snapshot()['pid']})"
            else:
                self.external.start()
        self.say(
            f"runrelay: {stk.node} epoch {self.epoch} serving {stk.kmsn} on {stk.node_ip}:"
            f"{stk.relay_port} (json) and :{stk.relay_port + 1} (passthrough){through}"
        )
        if stk.cloud is not None:
            self.start_tunnel()
        reason, successor = await self.serve_until_lost(loop, stopping)
        told = await self.stop(feed, successor)
        epoch, ip, port = successor
        self.say(f"runrelay: {reason}; told {told} connections epoch={epoch} ip={ip} port={port}; exiting")
        return 0

    async def start_listening(self) -> None:
        """Listen on `NODE_IP`; with ``RELAY_FORWARD = lan`` this member's station door held that
        address until it read this member's lease, so a bind it still holds is tried again for
        `BIND_WAIT` (every 20 ms) before the relay gives up."""
        stk = self.stk
        deadline = time.monotonic() + BIND_WAIT
        while True:
            try:
                await self.server.start(stk.node_ip, stk.relay_port)
                return
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or stk.relay_forward != "lan" or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.02)

    def start_tunnel(self) -> None:
        """CLOUD_URL: dial the cloud relay's tunnel, presenting the signed lease of this epoch."""
        stk, server, cloud = self.stk, self.server, self.stk.cloud
        # CLOUD_URL: the built-in relay (stkrelay.E076 refuses it with RELAY_KIND = exec)
        assert isinstance(server, RelayServer) and cloud is not None
        self.tunnel = TunnelClient(server=server, host=cloud.host, port=cloud.port,
                                   token=stk.cloud_token, lease_key=cloud_key(stk.pool_key, stk.kmsn),
                                   kmsn=stk.kmsn, node=stk.node, epoch=self.epoch,
                                   lease=self.reads.own_lease, gate=self.gate, keepalive=stk.relay_keepalive,
                                   also=[(u.host, u.port) for u in stk.clouds[1:]])  # fmt: skip
        self.tunnel.start()

    async def serve_until_lost(
        self, loop: asyncio.AbstractEventLoop, stopping: asyncio.Event
    ) -> tuple[str, Successor]:
        """Listen where wanted and write relay.json until a signal or the gate shuts: why, and who is next."""
        stk = self.stk
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
                    reason, successor = f"lost leadership: {why}", await self.reads.successor()
                    break
                moved = await self.listen.reconcile(self.wanted())
                if moved or loop.time() >= next_status:
                    self.write_status(True)
                    next_status = loop.time() + STATUS_EVERY
        return reason, successor

    async def stop(self, feed: BindingFeed, successor: Successor) -> int:
        """Close every listener (clients told where to go), then the external relay, the feed and the
        tunnel; the number of connections told."""
        server = self.server
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
        return told

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

    def write_status(self, listening: bool) -> None:
        snapshot = self.server.snapshot()
        if self.tunnel is not None:
            snapshot["tunnel"] = self.tunnel.snapshot()
        snapshot["listen"] = self.listen.snapshot()
        if self.external is not None:
            snapshot["external"] = self.external.snapshot()
        status = RelayStatus(
            os.getpid(), self.epoch, listening and self.serving(), time.monotonic(), bounded(snapshot)
        )
        try:
            self.local.write_relay(status)
        except OSError as exc:
            log.warning("cannot write the relay status in %s: %s", self.local.dir, exc)
