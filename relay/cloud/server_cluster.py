"""What a `relay.cloud.server.CloudServer` does as one node of several (issue 26 part 3).

A mixin of the server, by concept: the tunnel's claim of the directory entry
before ``registered`` (`relay.cloud.cluster`), the tunnel closed when its entry
is gone, and the parked remote clients of a site whose tunnel is on another
node followed there (`relay.cloud.forward`). docs/cloud.md's "Several cloud
nodes" says what and why.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from relay.cloud.forward import PeerLink
from relay.wire.framing import NOT_LEADER, STALE_EPOCH

if TYPE_CHECKING:
    from relay.cloud.cluster import ClusterDirectory
    from relay.cloud.config import CloudConfig
    from relay.cloud.peers import TunnelPeer
    from relay.cloud.remote_peers import RemotePeer

log = logging.getLogger("stkrelay.cloud")

LOOKUP_EVERY = 0.2  # s between two directory reads for a site whose parked clients wait
UNREACHABLE_FOR = 0.5  # s a node that refused a forward is not tried again
DIAL_PEER = 1.0  # s to connect to another node


class ClusterRouting:
    cfg: CloudConfig
    cluster: ClusterDirectory | None
    tunnels: dict[str, TunnelPeer]
    parked: dict[str, dict[RemotePeer, asyncio.TimerHandle]]
    tunnel_refusals: dict[str, int]
    unreachable: dict[str, float]
    _follows: dict[str, asyncio.Task[None]]

    if TYPE_CHECKING:

        @property
        def loop(self) -> asyncio.AbstractEventLoop: ...

        def _spawn(self, coro: Any) -> asyncio.Task[Any]: ...

        def count(self, what: str) -> None: ...

        def refused(self, code: str, peer: str) -> None: ...

        def route(self, remote: RemotePeer) -> None: ...

        def _unpark(self, remote: RemotePeer) -> None: ...

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
