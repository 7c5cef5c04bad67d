"""A cloud of several `runcloud` nodes (issue 26 part 3), in one event loop over real
loopback sockets: a site that knows several CLOUD_URLs re-dials another node when its
node goes, and remote clients reach it there."""

import asyncio
import dataclasses

from cloudrig import CLOUD_IP, KMSN, SITE_IP, Rig, json_client, until
from harness import free_pair, free_port

from relay.cloud.server import CloudServer
from relay.wire.events import Message


def test_a_site_whose_cloud_node_goes_redials_the_next_node_and_remote_clients_follow(tmp_path):
    async def scenario():
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        rig = Rig(tmp_path / "a")
        await rig.start()
        other = dataclasses.replace(rig.cfg, relay_port=free_pair(CLOUD_IP), tunnel_port=free_port(CLOUD_IP),
                                    data_dir=str(tmp_path / "b"))  # fmt: skip
        node_b = CloudServer(other)
        await node_b.start()
        server, tunnel = await rig.site("S001", 7, also=[(CLOUD_IP, other.tunnel_port)])
        await until(lambda: tunnel.state == "connected", 5, "the tunnel to the first node")
        assert rig.cloud.book.current[KMSN].epoch == 7 and KMSN not in node_b.book.current
        rig.cloud.close()  # the first node goes: its listeners and its tunnels

        # The node books the tunnel as it accepts it; the site says connected once it reads that answer.
        def redialled() -> bool:
            return KMSN in node_b.book.current and tunnel.state == "connected"

        await until(redialled, 5, "the tunnel re-dialled to the second node")
        assert tunnel.port == other.tunnel_port
        agent = await json_client(SITE_IP, server.addresses["json"][1], "agent", "S101")
        _, writer, conn = await json_client(CLOUD_IP, other.relay_port, "commander", "C01")
        conn.send_message({"via": "b"}, to="S101", id="m1")
        writer.write(conn.data_to_send())
        while True:
            agent[2].receive_data(await asyncio.wait_for(agent[0].read(65536), 5))
            got = [e for e in agent[2].events_received() if isinstance(e, Message)]
            if got:
                assert got[0].obj["data"] == {"via": "b"}
                break
        for w in (writer, agent[1]):
            w.close()
        await rig.stop()
        node_b.close()

    asyncio.run(scenario())
