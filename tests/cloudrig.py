"""A cloud relay and site relays with their tunnels in one event loop, over real loopback
sockets (`Rig`), and the clients the tests talk through it with."""

import asyncio
import json
import socket
import time

from harness import free_pair, free_port

from elections.core.lease import LeaseRecord
from relay.cloud.config import CloudConfig
from relay.cloud.server import CloudServer
from relay.cloud.web import serve_web
from relay.server.cloud_tunnel import TunnelClient
from relay.server.relay_server import RelayServer
from relay.wire.auth import new_nonce
from relay.wire.client_connection import ClientConnection
from relay.wire.events import Registered
from relay.wire.framing import RawData
from stkhost.pool_keys import cloud_key

KMSN, TOKEN, CLOUD_TOKEN = "9999-9999-99-99", "site-token-0123456789abcdef", "cloud-token-0123456789"
LEASE_KEY = cloud_key(TOKEN, KMSN)  # the site's POOL_KEY is its RELAY_TOKEN here
OTHER = "1111-1111-11-11"  # a second site of the same cloud (same site token, its own keys)
CLOUD_TOKENS = {KMSN: CLOUD_TOKEN, OTHER: "cloud-token-other-site-0123"}
CLOUD_IP, SITE_IP = "127.0.0.90", "127.0.0.91"


def lease(node, epoch, kmsn=KMSN):
    """The site's lease of (`node`, `epoch`), signed with its pool key as on the share."""
    record = LeaseRecord(kmsn=kmsn, station=node, ip=SITE_IP, port=1, pid=1, epoch=epoch,
                         lease_until="20261201120000", node=node, renew_seq=1, ttl_s=10)  # fmt: skip
    return json.loads(record.encode(TOKEN))


class Rig:
    """A cloud serving KMSN and OTHER, and `site(node, epoch)` makes a site relay with its tunnel to it."""

    def __init__(self, tmp_path, **cfg):
        self.cfg = CloudConfig(listen_ip=CLOUD_IP, relay_port=free_pair(CLOUD_IP),
                               tunnel_port=free_port(CLOUD_IP), web_port=free_port(CLOUD_IP),
                               data_dir=str(tmp_path), tokens=dict(CLOUD_TOKENS),
                               lease_keys={k: cloud_key(TOKEN, k) for k in CLOUD_TOKENS},
                               **{"keepalive": 1.0, "park": 2.0, **cfg})  # fmt: skip
        self.cloud = CloudServer(self.cfg)
        self.sites: list[tuple[RelayServer, TunnelClient]] = []

    async def start(self):
        await self.cloud.start()
        self.web = await serve_web(self.cloud)

    async def site(self, node, epoch, kmsn=KMSN, also=()):
        # The relay drops a peer with 1 MiB unsent (4 MiB by default): a smaller test, the same rule.
        server = RelayServer(
            node=node, kmsn=kmsn, token=TOKEN, gate=lambda: True, epoch=epoch, buffer_limit=1 << 20
        )
        await server.start(SITE_IP, free_pair(SITE_IP))

        async def own_lease():
            return lease(node, epoch, kmsn)

        tunnel = TunnelClient(
            server=server,
            host=CLOUD_IP,
            port=self.cfg.tunnel_port,
            token=CLOUD_TOKENS[kmsn],
            lease_key=cloud_key(TOKEN, kmsn),
            kmsn=kmsn,
            node=node,
            epoch=epoch,
            lease=own_lease,
            gate=lambda: True,
            keepalive=1.0,
            also=also,
        )
        tunnel.start()
        self.sites.append((server, tunnel))
        return server, tunnel

    async def stop(self):
        for server, tunnel in self.sites:
            await tunnel.stop()
            server.lose_leadership()
            await server.wait_closed(0.2)
        self.cloud.close()
        self.web.close()


async def until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


class Raw:
    """A passthrough client (asyncio streams) registered as (role, station)."""

    @classmethod
    async def open(cls, ip, port, role, station, rcvbuf=None, kmsn=KMSN):
        self = cls()
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (ip, port))
        self.reader, self.writer = await asyncio.open_connection(sock=sock)
        conn = ClientConnection(
            role=role, kmsn=kmsn, station=station, token=TOKEN, raw_mode=True, cnonce=new_nonce()
        )
        self.rest = bytearray()
        while True:
            data = await asyncio.wait_for(self.reader.read(65536), 5)
            assert data, "closed during the handshake"
            conn.receive_data(data)
            self.writer.write(conn.data_to_send())
            events = conn.events_received()
            for e in events:
                if isinstance(e, RawData):
                    self.rest += e.data
            if any(isinstance(e, Registered) for e in events):
                assert conn.proven
                return self


async def json_client(ip, port, role, station, kmsn=KMSN):
    reader, writer = await asyncio.open_connection(ip, port)
    conn = ClientConnection(role=role, kmsn=kmsn, station=station, token=TOKEN, cnonce=new_nonce())
    while True:
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, "closed before registered"  # read() at EOF returns b"" at once: never spin on it
        conn.receive_data(data)
        writer.write(conn.data_to_send())
        if any(isinstance(e, Registered) for e in conn.events_received()):
            return reader, writer, conn
