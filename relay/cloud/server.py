"""The cloud rendezvous relay (docs/design.md §14): listeners and what the connections share.

    server = CloudServer(load("cloud.ini"))
    await server.start()       # remote clients on RELAY_PORT (+1 passthrough), tunnels on TUNNEL_PORT
    ...
    server.status()            # the pools, their epochs, tunnels and clients (the /status JSON)

One job: hold the fence (`relay.cloud.fence.EpochFence`, saved to
``DATA_DIR/epochs.json`` at every accepted tunnel, so a restarted cloud still
refuses a stale leader), the book of tunnels, the current tunnel per KMSN, the
remote clients parked while their KMSN has none, the connection caps
(`relay.server.limits`) and the counters. The connections are `relay.cloud.peers`.

Decisions worth knowing:

- A higher epoch replaces the open tunnel at once, in one loop turn: the book
  closes the old record and opens the new one at the same instant, the old
  tunnel gets ``leader_changed`` and is closed, and its remote clients are
  sent back to the cloud (``leader_changed`` naming the cloud). Rather than
  re-route their sessions silently to the new leader, the cloud ends them:
  a session was authenticated by the old leader over a nonce that is spent,
  and its 1.1 proof binds the old epoch; the clients' own follow logic
  (re-register, re-send the unconfirmed window, drop duplicates) is what
  local clients do on a failover, so remote ones behave the same.
- A remote client whose KMSN has no tunnel is parked up to PARK seconds and
  routed the moment a tunnel arrives, so after a failover the clients that
  reconnected at once do not wait out a backoff. At most PARK_MAX wait per
  KMSN: a flood of registers (the cloud cannot tell a real one from a fake)
  gets ``not_leader`` at once, counted ``park_full``, and its memory stays
  bounded (PARK_MAX × `relay.cloud.peers.PARKED_LIMIT` per KMSN).
- A refused tunnel is counted by cause (``tunnel_refusals``); one whose lease
  MAC does not verify (forged, missing, no key) is a security event: logged
  as ``SECURITY``, counted per KMSN with what it claimed (``lease_refused``,
  ``last_lease_refused`` on /status). Neither the fence nor the current
  tunnel is touched by a refused one.
- The cloud decides nothing about a site and stores nothing but the epochs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Hashable
from functools import partial
from pathlib import Path
from typing import Any

from relay.cloud.cluster import ClusterDirectory
from relay.cloud.config import CloudConfig
from relay.cloud.fence import EpochFence, TunnelBook, TunnelRecord
from relay.cloud.forward import ForwardedPeer, PeerLink
from relay.cloud.grants import grant_refusal
from relay.cloud.handshake import TunnelAcceptor
from relay.cloud.peers import TunnelPeer
from relay.cloud.remote_peers import RemotePeer, RemoteViewer
from relay.server.limits import Admission, Caps
from relay.server.refusal_log import RefusalLog
from relay.server.relay_server import BACKLOG, file_limit
from relay.wire.framing import BAD_AUTH, NOT_LEADER, STALE_EPOCH, WRONG_KMSN

log = logging.getLogger("stkrelay.cloud")

EPOCHS_NAME = "epochs.json"


LOOKUP_EVERY = 0.2  # s between two directory reads for a site whose parked clients wait
UNREACHABLE_FOR = 0.5  # s a node that refused a forward is not tried again
DIAL_PEER = 1.0  # s to connect to another node


class CloudServer:
    """The cloud relay: its sites' tunnels, their remote clients, and as one node of several the
    directory's entries (the tunnel's claim before ``registered``, the tunnel closed when its
    entry is gone, parked clients followed to the node that holds their site: docs/cloud.md's
    "Several cloud nodes")."""

    def __init__(self, cfg: CloudConfig, caps: Caps | None = None) -> None:
        self.cfg = cfg
        self.epochs_path = Path(cfg.data_dir) / EPOCHS_NAME
        self.fence = EpochFence.from_doc(self._saved_epochs())
        self.book = TunnelBook()
        self.tunnels: dict[str, TunnelPeer] = {}
        self.parked: dict[str, dict[RemotePeer, asyncio.TimerHandle]] = {}
        self.remotes: set[RemotePeer] = set()
        self.admission = Admission((lambda: caps) if caps else lambda: Caps.sized(file_limit()))
        self.counters: dict[str, int] = {}
        self.refusals: dict[str, int] = {}
        self.refusal_log = RefusalLog(log, now=time.monotonic, later=self._later)
        self.tunnel_refusals: dict[str, int] = {}  # by TunnelAcceptor.cause
        self.lease_refusals: dict[str, dict[str, int]] = {}  # kmsn -> cause -> n (a lease MAC refused)
        self.last_lease_refusal: dict[str, dict[str, Any]] = {}  # kmsn -> what the last one claimed
        self.addresses: dict[str, tuple[str, int]] = {}
        self.started = 0.0
        self._listeners: list[asyncio.Server] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        cluster = cfg.cluster
        self.cluster = ClusterDirectory(cluster, self.count, self._directory_lost) if cluster else None
        self.parked_since: dict[RemotePeer, float] = {}
        self.unreachable: dict[str, float] = {}  # node -> when a forward to it last failed
        self._follows: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "start() the server first"
        return self._loop

    async def start(self) -> None:
        """Listen on LISTEN_IP: RELAY_PORT, +1, TUNNEL_PORT. Raises OSError (then none listens)."""
        self._loop = asyncio.get_running_loop()
        self.started = self._loop.time()
        cfg = self.cfg
        plan: list[tuple[str, Callable[[CloudServer], asyncio.Protocol], int]] = [
            ("json", RemotePeer, cfg.relay_port), ("passthrough", RemoteViewer, cfg.relay_port + 1),
            ("tunnel", TunnelPeer, cfg.tunnel_port),
        ]  # fmt: skip
        if cfg.cluster is not None:
            plan.append(("peer", ForwardedPeer, cfg.cluster.peer_port))
        try:
            for name, kind, port in plan:
                listener = await self._loop.create_server(
                    partial(kind, self), cfg.listen_ip, port, backlog=BACKLOG, reuse_address=True
                )
                self._listeners.append(listener)
                self.addresses[name] = listener.sockets[0].getsockname()[:2]
        except OSError:
            self.close()
            raise
        if self.cluster is not None:
            self._spawn(self.cluster.run())

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def close(self) -> None:
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        for task in list(self._tasks):
            task.cancel()
        for tunnel in list(self.tunnels.values()):
            tunnel.abort()
        for remote in list(self.remotes):
            remote.tunnel_gone(None)
        if self.cluster is not None:
            self.cluster.close()

    # -- what the peers call -----------------------------------------------------------
    def admit(self, peer: Hashable, address: str) -> bool:
        accepted, evicted = self.admission.admit(peer, address)
        if isinstance(evicted, RemotePeer):
            evicted.refuse("timeout", "too many connections are waiting; this one waited longest")
        elif isinstance(evicted, TunnelPeer):
            evicted.abort()
        if not accepted:
            self.count("refused_connection")
        elif isinstance(peer, RemotePeer):
            self.remotes.add(peer)
        return accepted

    def release(self, peer: Hashable) -> None:
        self.admission.release(peer)

    def joined(self, peer: Hashable) -> None:
        self.admission.registered(peer)

    def count(self, what: str) -> None:
        self.counters[what] = self.counters.get(what, 0) + 1

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_later(delay, fn)

    def refused(self, code: str, peer: str, detail: str = "") -> None:
        self.refusals[code] = self.refusals.get(code, 0) + 1
        n = sum(self.refusals.values())  # a flood of bad clients is summed up, not written out
        self.refusal_log.refused(code, "refused %s: %s %s(%d refusals so far)", peer, code,
                                 f"({detail[:200]}) " if detail else "", n)  # fmt: skip

    def tunnel_refused(self, core: TunnelAcceptor, peer: str) -> None:
        """A tunnel's handshake ended without ``registered``: count it by code and cause."""
        code = core.refusal or "closed"
        cause = core.cause or code
        self.refused(code, peer)
        self.tunnel_refusals[cause] = self.tunnel_refusals.get(cause, 0) + 1
        if core.claim is None or not cause.startswith("lease_"):
            return
        kmsn, node, epoch = core.claim  # the token checked out: kmsn is a configured site
        causes = self.lease_refusals.setdefault(kmsn, {})
        causes[cause] = causes.get(cause, 0) + 1
        self.last_lease_refusal[kmsn] = {"cause": cause, "node": node[:64], "epoch": epoch, "peer": peer,
                                         "at": round(self.loop.time(), 3)}  # fmt: skip
        n = sum(causes.values())
        if n <= 20 or n % 1000 == 0:
            held = f"{self.fence.holders.get(kmsn)} epoch {self.fence.epochs.get(kmsn)}"
            log.warning("SECURITY: tunnel from %s for %s refused, %s: claims %s epoch %d, held by %s "
                        "(%d such refusals)", peer, kmsn, cause, node[:64], epoch, held, n)  # fmt: skip

    def tunnel_accepted(self, tunnel: TunnelPeer) -> TunnelRecord:
        """`tunnel` passed the handshake and the fence: it is its KMSN's tunnel from now on."""
        reg = tunnel.registration
        assert reg is not None
        self.admission.registered(tunnel)
        self.fence.accept(reg.kmsn, reg.epoch, reg.node)
        self._save_epochs()
        record, old = self.book.open(reg.kmsn, reg.epoch, reg.node, self.loop.time())
        previous = self.tunnels.get(reg.kmsn)
        self.tunnels[reg.kmsn] = tunnel
        if previous is not None and previous is not tunnel:
            log.info("tunnel of %s: epoch %d (%s) replaces epoch %s", reg.kmsn, reg.epoch, reg.node,
                     old.epoch if old else "?")  # fmt: skip
            self.count("replaced")
            previous.replaced(reg.epoch, reg.node)
        log.info("tunnel of %s accepted: %s epoch %d from %s", reg.kmsn, reg.node, reg.epoch, tunnel.peer)
        self.count("tunnels_accepted")
        tunnel.record = record
        for remote in list(self.parked.get(reg.kmsn, {})):
            self._unpark(remote)
            remote.attach(tunnel)
        return record

    def tunnel_lost(self, tunnel: TunnelPeer, reason: str) -> None:
        record = tunnel.record
        assert record is not None
        if self.book.is_current(record):
            self.book.close(record, self.loop.time(), reason)
            log.info("tunnel of %s epoch %d lost: %s", record.kmsn, record.epoch, reason)
        if self.tunnels.get(record.kmsn) is tunnel:
            del self.tunnels[record.kmsn]
        if self.cluster is not None and tunnel.lease:
            self.cluster.release(record.kmsn, tunnel.lease)

    def route(self, remote: RemotePeer) -> None:
        """`remote` named its KMSN: to its tunnel now, or parked until one comes (a commander
        at a cloud with grants only with a grant listing it: `relay.cloud.grants`, checked
        before whether this cloud serves the KMSN at all)."""
        cause = grant_refusal(self.cfg.grants, remote.greeting.nonce, remote.greeting.register)
        if cause is not None:
            self.count(cause)
            n, g = self.counters[cause], remote.greeting
            grant = str(g.register.get("grant"))[:64]
            if n <= 20 or n % 1000 == 0:
                log.warning("SECURITY: commander %s at %s refused for %s: %s (grant %r, %d so far)",
                            g.station, remote.peer, remote.kmsn[:64], cause, grant, n)  # fmt: skip
            if cause == "grant_unlisted":
                remote.refuse(WRONG_KMSN, f"this commander's grant does not list {remote.kmsn[:64]}")
            else:
                remote.refuse(BAD_AUTH, "a commander at this cloud needs a grant (grant, grant_auth)")
            return
        if remote.kmsn not in self.cfg.tokens:  # after the grant: a stranger learns no KMSN from it
            remote.refuse(WRONG_KMSN, f"this cloud serves no site {remote.kmsn[:64]}")
            return
        tunnel = self.tunnels.get(remote.kmsn)
        if tunnel is not None and not tunnel.dead:
            remote.attach(tunnel)
            return
        if self.cfg.park <= 0:
            remote.park_expired()
            return
        if len(self.parked.get(remote.kmsn, {})) >= self.cfg.park_max:
            self.count("park_full")
            remote.refuse(NOT_LEADER, f"no leader of {remote.kmsn[:64]} is connected, and too many wait")
            return
        since = self.parked_since.setdefault(remote, self.loop.time())
        left = self.cfg.park - (self.loop.time() - since)
        if left <= 0:
            remote.park_expired()
            return
        timer = self.loop.call_later(left, self._park_expired, remote)
        self.parked.setdefault(remote.kmsn, {})[remote] = timer
        self.count("parked")
        if self.cluster is not None and not remote.forwarded:
            self._follow(remote.kmsn)

    def forget(self, remote: RemotePeer) -> None:
        self._unpark(remote)
        self.parked_since.pop(remote, None)
        self.remotes.discard(remote)
        self.release(remote)

    def client_address(self) -> tuple[str | None, int | None]:
        """Where remote clients reach the cloud (in the ``leader_changed`` it sends them)."""
        ip = self.cfg.listen_ip
        return (None if ip in ("0.0.0.0", "::") else ip), self.cfg.relay_port

    def _park_expired(self, remote: RemotePeer) -> None:
        self._unpark(remote)
        remote.park_expired()

    def _unpark(self, remote: RemotePeer) -> None:
        waiting = self.parked.get(remote.kmsn)
        if waiting and remote in waiting:
            waiting.pop(remote).cancel()
            if not waiting:
                del self.parked[remote.kmsn]

    # -- the saved fence -----------------------------------------------------------------
    def _saved_epochs(self) -> object:
        try:
            with open(self.epochs_path, encoding="utf-8") as fh:
                return json.loads(fh.read(1 << 20))
        except (OSError, ValueError):
            return {}

    def _save_epochs(self) -> None:
        tmp = self.epochs_path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(self.fence.to_doc(), indent=1))
            os.replace(tmp, self.epochs_path)
        except OSError as exc:
            log.warning("cannot save the epochs in %s: %s", self.epochs_path, exc)

    # -- status ----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        now = self.loop.time()
        pools: dict[str, Any] = {}
        for kmsn in sorted(self.cfg.tokens):
            record = self.book.current.get(kmsn)
            clients = [r for r in self.remotes if r.kmsn == kmsn and not r.dead]
            pools[kmsn] = {
                "epoch": self.fence.epochs.get(kmsn),
                "holder": self.fence.holders.get(kmsn),
                "tunnel": record.as_dict(now) if record else None,
                "remote_clients": sum(1 for r in clients if r.registered),
                "parked": len(self.parked.get(kmsn, {})),
                "lease_refused": dict(sorted(self.lease_refusals.get(kmsn, {}).items())),
                "last_lease_refused": self.last_lease_refusal.get(kmsn),
                "clients": sorted((r.describe() for r in clients), key=lambda d: (d["station"], d["peer"])),
            }
        return {
            "now": round(now, 3),
            "uptime_s": round(now - self.started, 3),
            "listening": {name: f"{ip}:{port}" for name, (ip, port) in self.addresses.items()},
            "pools": pools,
            "tunnels": self.book.records(now),
            "refused": dict(sorted(self.refusals.items())),
            "tunnel_refusals": dict(sorted(self.tunnel_refusals.items())),
            "counters": dict(sorted(self.counters.items())),
            "admission": self.admission.snapshot(),
            "cluster": self.cluster.snapshot() if self.cluster is not None else None,
        }

    # -- as one node of several (issue 26 part 3) -----------------------------------------
    def claim_tunnel(self, tunnel: TunnelPeer, out: bytes) -> None:
        """`tunnel` passed the handshake: accept it once this node won the directory's entry."""
        self._spawn(self._claim(tunnel, out))

    async def _claim(self, tunnel: TunnelPeer, out: bytes) -> None:
        reg = tunnel.registration
        assert reg is not None and self.cluster is not None
        lease, cause, held = await self.cluster.claim(reg.kmsn, reg.epoch)
        if lease and tunnel.dead:  # the site went while we claimed: the entry goes too
            self.cluster.release(reg.kmsn, lease)
            return
        if lease:
            tunnel.claimed(out, lease)
            return
        self.tunnel_refusals[cause] = self.tunnel_refusals.get(cause, 0) + 1
        self.count(cause)
        code = STALE_EPOCH if cause == "directory_stale" else NOT_LEADER
        who = f"{held[0][:64]} at epoch {held[1]}" if held else "nobody"
        message = {"directory_stale": f"the directory holds {reg.kmsn} at a higher epoch ({who})",
                   "directory_held": f"another cloud node holds {reg.kmsn} at this epoch ({who})",
                   "directory_untrusted": "the directory's entry for this site is not evidence",
                   }.get(cause, "the directory (etcd) does not answer")  # fmt: skip
        self.refused(code, tunnel.peer)
        log.warning("tunnel of %s epoch %d from %s refused: %s", reg.kmsn, reg.epoch, tunnel.peer, message)
        tunnel.claim_refused(code, message)

    def _directory_lost(self, kmsn: str) -> None:
        """Our entry of `kmsn` is gone from etcd (expired, or taken by a higher epoch): its tunnel goes."""
        tunnel = self.tunnels.get(kmsn)
        if tunnel is not None and not tunnel.dead:
            log.warning("tunnel of %s closed: this node's directory entry is gone", kmsn)
            self.count("directory_lost")
            tunnel.lease = 0
            tunnel.abort()

    def _follow(self, kmsn: str) -> None:
        if kmsn not in self._follows:
            self._follows[kmsn] = self._spawn(self._follow_site(kmsn))

    async def _follow_site(self, kmsn: str) -> None:
        """While clients of `kmsn` are parked here without its tunnel: forward them to the holder."""
        assert self.cluster is not None
        cluster = self.cluster.cluster
        try:
            while self.parked.get(kmsn) and not self._has_tunnel(kmsn):
                held = await self.cluster.lookup(kmsn)
                node = held[0] if held else None
                if node is not None and node != cluster.node and not self._has_tunnel(kmsn):
                    if node not in cluster.nodes:
                        self.count("directory_unknown_node")  # never an address read from etcd
                    elif self.loop.time() - self.unreachable.get(node, -1e9) >= UNREACHABLE_FOR:
                        for remote in list(self.parked.get(kmsn, {})):
                            self._unpark(remote)
                            self._forward(remote, node)
                await asyncio.sleep(LOOKUP_EVERY)
        finally:
            self._follows.pop(kmsn, None)

    def _has_tunnel(self, kmsn: str) -> bool:
        tunnel = self.tunnels.get(kmsn)
        return tunnel is not None and not tunnel.dead

    def _forward(self, remote: RemotePeer, node: str) -> None:
        assert self.cfg.cluster is not None
        host, port = self.cfg.cluster.nodes[node]
        link = PeerLink(self, remote, node)
        remote.attach(link)
        self._spawn(self._dial(link, host, port))

    async def _dial(self, link: PeerLink, host: str, port: int) -> None:
        try:
            async with asyncio.timeout(DIAL_PEER):
                await self.loop.create_connection(lambda: link, host, port)
        except (OSError, TimeoutError):
            self.forward_failed(link, "peer_unreachable")

    def forward_failed(self, link: PeerLink, cause: str) -> None:
        """`link` never opened: the client goes back to waiting here (what it sent kept)."""
        if link.stage != "failed":
            link.stage, link.dead = "failed", True
        self.count(cause)
        self.unreachable[link.node] = self.loop.time()
        remote = link.remote
        if remote.tunnel is link:
            remote.tunnel, remote.stream = None, 0
        remote.greeting.buffer[:0] = link.pending
        link.pending.clear()
        assert self.cluster is not None
        self.cluster.invalidate(remote.kmsn)
        if not remote.dead:
            self.route(remote)
