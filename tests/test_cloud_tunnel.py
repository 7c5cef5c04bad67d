"""The cloud relay and a leader's tunnel in one event loop, over real loopback sockets:
per-stream flow control (a slow remote viewer stalls nobody), replacement by a higher
epoch, WebSocket remote clients, and the cloud's status and metrics pages."""

import asyncio
import json
import socket
import time

import pytest
from harness import free_port

from relay.cloud.config import CloudConfig
from relay.cloud.server import CloudServer
from relay.cloud.tunnel import TunnelClient
from relay.cloud.web import serve_web
from relay.protocol import ClientConnection, Message, RawData, Registered, new_nonce
from relay.server import RelayServer

KMSN, TOKEN, CLOUD_TOKEN = "9999-9999-99-99", "site-token-0123456789abcdef", "cloud-token-0123456789"
CLOUD_IP, SITE_IP = "127.0.0.90", "127.0.0.91"


def lease(node, epoch):
    return {"kmsn": KMSN, "station": node, "ip": SITE_IP, "port": 1, "pid": 1, "epoch": epoch,
            "lease_until": "20261201120000", "v": 1, "node": node, "renew_seq": 1, "ttl_s": 10,
            "handoff_to": None, "sig": "a" * 64}  # fmt: skip


def pair_port(ip):
    while True:
        port = free_port(ip)
        try:
            with socket.socket() as s:
                s.bind((ip, port + 1))
            return port
        except OSError:
            continue


class Rig:
    """A cloud, and `site(node, epoch)` makes a site relay with its tunnel to it."""

    def __init__(self, tmp_path):
        self.cfg = CloudConfig(listen_ip=CLOUD_IP, relay_port=pair_port(CLOUD_IP),
                               tunnel_port=free_port(CLOUD_IP), web_port=free_port(CLOUD_IP),
                               data_dir=str(tmp_path), keepalive=1.0, park=2.0,
                               tokens={KMSN: CLOUD_TOKEN})  # fmt: skip
        self.cloud = CloudServer(self.cfg)
        self.sites: list[tuple[RelayServer, TunnelClient]] = []

    async def start(self):
        await self.cloud.start()
        self.web = await serve_web(self.cloud)

    async def site(self, node, epoch):
        # The relay drops a peer with 1 MiB unsent (4 MiB by default): a smaller test, the same rule.
        server = RelayServer(
            node=node, kmsn=KMSN, token=TOKEN, gate=lambda: True, epoch=epoch, buffer_limit=1 << 20
        )
        await server.start(SITE_IP, pair_port(SITE_IP))

        async def own_lease():
            return lease(node, epoch)

        tunnel = TunnelClient(server=server, host=CLOUD_IP, port=self.cfg.tunnel_port, token=CLOUD_TOKEN,
                              kmsn=KMSN, node=node, epoch=epoch, lease=own_lease, gate=lambda: True,
                              keepalive=1.0)  # fmt: skip
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
    async def open(cls, ip, port, role, station, rcvbuf=None):
        self = cls()
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (ip, port))
        self.reader, self.writer = await asyncio.open_connection(sock=sock)
        conn = ClientConnection(
            role=role, kmsn=KMSN, station=station, token=TOKEN, raw_mode=True, cnonce=new_nonce()
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


async def json_client(ip, port, role, station):
    reader, writer = await asyncio.open_connection(ip, port)
    conn = ClientConnection(role=role, kmsn=KMSN, station=station, token=TOKEN, cnonce=new_nonce())
    while True:
        conn.receive_data(await asyncio.wait_for(reader.read(65536), 5))
        writer.write(conn.data_to_send())
        if any(isinstance(e, Registered) for e in conn.events_received()):
            return reader, writer, conn


def test_a_slow_remote_viewer_is_dropped_at_the_site_while_the_publisher_and_a_fast_viewer_go_on(tmp_path):
    async def scenario():
        rig = Rig(tmp_path)
        await rig.start()
        server, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the tunnel")
        port = rig.cfg.relay_port + 1
        slow = await Raw.open(CLOUD_IP, port, "viewer", "CAM1", rcvbuf=4096)  # never reads
        fast = await Raw.open(CLOUD_IP, port, "viewer", "CAM1")
        publisher = await Raw.open(SITE_IP, server.addresses["passthrough"][1], "publisher", "CAM1")
        total, chunk = 6 << 20, bytes(range(256)) * 256  # 6 MiB at about 3 MB/s (a camera sends ~1)
        got = bytearray(fast.rest)

        async def read_fast():
            while len(got) < total:
                data = await fast.reader.read(1 << 16)
                assert data, "the fast viewer was closed"
                got.extend(data)

        reader = asyncio.create_task(read_fast())
        started = time.monotonic()
        for _ in range(total // len(chunk)):
            publisher.writer.write(chunk)
            await publisher.writer.drain()  # the site reads its publisher at once: this never waits long
            await asyncio.sleep(0.02)
        published = time.monotonic() - started
        await asyncio.wait_for(reader, 30)
        assert bytes(got) == chunk * (total // len(chunk))  # every byte, in order
        await until(
            lambda: server.drops.get("slow_viewer", 0) == 1, 5, "the slow viewer dropped, at the site"
        )
        assert tunnel.accepted == 1 and tunnel.state == "connected"  # the tunnel itself never suffered
        # The cloud lets the stuck client go too (it cannot flush what it holds for it).
        await until(lambda: len(rig.cloud.remotes) == 1, 5, "the cloud to let the stuck viewer go")
        for c in (slow, fast, publisher):
            c.writer.close()
        await rig.stop()
        return published

    published = asyncio.run(scenario())
    print(f"published 6 MiB in {published:.2f} s with a stuck remote viewer")


def test_a_higher_epoch_replaces_the_tunnel_and_remote_clients_come_back_through_it(tmp_path):
    async def scenario():
        rig = Rig(tmp_path)
        await rig.start()
        _, old = await rig.site("S001", 7)
        await until(lambda: old.state == "connected", 5, "the first tunnel")
        reader, writer, conn = await json_client(CLOUD_IP, rig.cfg.relay_port, "commander", "C01")
        assert rig.cloud.status()["pools"][KMSN]["remote_clients"] == 1
        new_server, new = await rig.site("S002", 8)
        await until(lambda: new.state == "connected", 5, "the second tunnel")
        # The remote commander is told the leader changed, pointing at the cloud itself.
        frames = []
        while not conn.closed:
            data = await asyncio.wait_for(reader.read(65536), 5)
            if not data:
                break
            conn.receive_data(data)
            frames += conn.events_received()
        moved = [e for e in frames if type(e).__name__ == "LeaderChanged"]
        assert moved and (moved[0].epoch, moved[0].ip, moved[0].port) == (8, CLOUD_IP, rig.cfg.relay_port)
        assert moved[0].proven
        writer.close()
        await until(lambda: old.replaced_by == 8, 5, "the old tunnel to hear it was replaced")
        # The old leader redials while it still believes it leads: refused, stale.
        await until(lambda: old.refusals.get("stale_epoch", 0) >= 1, 10, "the old tunnel's redial refused")
        assert rig.cloud.status()["pools"][KMSN]["tunnel"]["epoch"] == 8
        # Through the new tunnel: a remote commander reaches the new leader's agent.
        agent = await json_client(SITE_IP, new_server.addresses["json"][1], "agent", "S101")
        _, w2, c2 = await json_client(CLOUD_IP, rig.cfg.relay_port, "commander", "C01")
        c2.send_message({"hi": 1}, to="S101", id="x1")
        w2.write(c2.data_to_send())
        while True:
            agent[2].receive_data(await asyncio.wait_for(agent[0].read(65536), 5))
            got = [e for e in agent[2].events_received() if isinstance(e, Message)]
            if got:
                assert got[0].obj["data"] == {"hi": 1}
                break
        records = rig.cloud.status()["tunnels"]
        assert [(r["epoch"], r["closed"] is None) for r in records] == [(7, False), (8, True)]
        assert json.loads((tmp_path / "epochs.json").read_text())[KMSN] == {"epoch": 8, "node": "S002"}
        for w in (w2, agent[1]):
            w.close()
        await rig.stop()

    asyncio.run(scenario())


def test_websocket_clients_and_the_status_and_metrics_pages_of_the_cloud(tmp_path):
    import urllib.request

    from websockets.asyncio.client import connect

    async def scenario():
        rig = Rig(tmp_path)
        await rig.start()
        server, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the tunnel")
        agent = await json_client(SITE_IP, server.addresses["json"][1], "agent", "S101")
        async with connect(f"ws://{CLOUD_IP}:{rig.cfg.web_port}/ws/relay/") as ws:
            conn = ClientConnection(
                role="commander", kmsn=KMSN, station="W01", token=TOKEN, cnonce=new_nonce()
            )

            async def pump():
                text = await asyncio.wait_for(ws.recv(), 5)
                payload = text.encode()
                conn.receive_data(len(payload).to_bytes(4, "big") + payload)
                out = conn.data_to_send()
                if out:
                    await ws.send(out[4:].decode())
                return conn.events_received()

            while not any(isinstance(e, Registered) for e in await pump()):
                pass
            conn.send_message({"via": "ws"}, to="S101")
            await ws.send(conn.data_to_send()[4:].decode())
            while True:
                agent[2].receive_data(await asyncio.wait_for(agent[0].read(65536), 5))
                if any(isinstance(e, Message) for e in agent[2].events_received()):
                    break

            def get(path):
                with urllib.request.urlopen(f"http://{CLOUD_IP}:{rig.cfg.web_port}{path}", timeout=5) as r:
                    return r.read().decode()

            status = json.loads(await asyncio.to_thread(get, "/status"))
            assert (
                status["pools"][KMSN]["tunnel"]["epoch"] == 7 and status["pools"][KMSN]["remote_clients"] == 1
            )
            metrics = await asyncio.to_thread(get, "/metrics")
            assert f'stkcloud_tunnel_up{{kmsn="{KMSN}"}} 1.0' in metrics
            assert f'stkcloud_remote_clients{{kmsn="{KMSN}"}} 1.0' in metrics
        agent[1].close()
        await rig.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("park", [0.0])
def test_a_remote_client_of_a_site_without_a_tunnel_is_refused_not_leader(tmp_path, park):
    async def scenario():
        rig = Rig(tmp_path)
        rig.cfg.park = park
        await rig.start()
        reader, writer = await asyncio.open_connection(CLOUD_IP, rig.cfg.relay_port)
        conn = ClientConnection(role="commander", kmsn=KMSN, station="C09", token=TOKEN)
        codes = []
        while not conn.closed:
            data = await asyncio.wait_for(reader.read(65536), 5)
            if not data:
                break
            conn.receive_data(data)
            writer.write(conn.data_to_send())
            codes += [getattr(e, "code", None) for e in conn.events_received()]
        assert "not_leader" in codes
        writer.close()
        await rig.stop()

    asyncio.run(scenario())


def test_registered_remote_clients_are_never_evicted_to_make_room_for_newcomers(tmp_path):
    from relay.limits import Caps

    async def scenario():
        rig = Rig(tmp_path)
        rig.cloud = CloudServer(rig.cfg, caps=Caps(total=50, preauth=3, per_address=50))
        await rig.start()
        _, tunnel = await rig.site("S001", 7)
        await until(lambda: tunnel.state == "connected", 5, "the tunnel")
        held = [await json_client(CLOUD_IP, rig.cfg.relay_port, "commander", f"C{i:02d}") for i in range(5)]
        await until(
            lambda: rig.cloud.status()["pools"][KMSN]["remote_clients"] == 5, 5, "five remote clients"
        )
        idle = [
            await asyncio.open_connection(CLOUD_IP, rig.cfg.relay_port) for _ in range(6)
        ]  # never register
        await asyncio.sleep(0.2)
        assert rig.cloud.status()["pools"][KMSN]["remote_clients"] == 5  # the idle ones evicted each other
        assert rig.cloud.admission.refused["evicted"] >= 3
        for _, w, _ in held:
            w.close()
        for _, w in idle:
            w.close()
        await rig.stop()

    asyncio.run(scenario())
