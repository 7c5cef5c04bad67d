"""The cloud relay and a leader's tunnel in one event loop, over real loopback sockets:
per-stream flow control (a slow remote viewer stalls nobody), replacement by a higher
epoch, WebSocket remote clients, and the cloud's status and metrics pages."""

import asyncio
import json
import time

import pytest
from cloudrig import CLOUD_IP, KMSN, SITE_IP, TOKEN, Raw, Rig, json_client, until

from relay.cloud.server import CloudServer
from relay.wire.auth import new_nonce
from relay.wire.client_connection import ClientConnection
from relay.wire.events import Message, Registered


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
    from relay.server.limits import Caps

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
