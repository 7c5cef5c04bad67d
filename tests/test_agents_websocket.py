"""WebSocket routes on real agents: a browser-style commander on /ws/relay/ and a
TCP agent exchange messages both ways through the one routing table."""

import asyncio
import json

import pytest
from harness import KMSN, TOKEN, listening, wait_until
from websockets.asyncio.client import connect

from relay.client import Received, RelayClient
from relay.discovery import Discovery
from relay.protocol import auth_digest

pytestmark = pytest.mark.agents


def test_a_websocket_commander_and_a_tcp_agent_talk_both_ways_even_after_idling(site_factory):
    site = site_factory(3)
    site.start()
    lease = site.wait_leader(timeout=40)
    leader = site.by_name(lease.node)
    port = int(leader.setting("RELAY_PORT"))
    wait_until(lambda: listening(leader.ip, port), 10, "the leader's relay")
    # The browser talks to a follower's panel: the bridge finds the leader's relay.
    follower = next(a for a in site.agents if a is not leader)
    web = f"{follower.ws_url}/ws/relay/"  # wss://, trusting the follower's own certificate
    wait_until(lambda: listening(follower.ip, int(follower.setting("WEB_PORT"))), 20, "the follower's web")

    async def scenario():
        discovery = Discovery.build(token=TOKEN, kmsn=KMSN, lease_dir=str(site.lease_dir))
        agent = RelayClient(role="agent", kmsn=KMSN, station="S201", token=TOKEN, discovery=discovery)
        await agent.start(timeout=15)
        async with connect(web, open_timeout=10, ssl=follower.web_ssl()) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert hello["type"] == "hello" and hello["node"] == lease.node
            auth = auth_digest(TOKEN, hello["nonce"], "commander", KMSN, "C01")
            await ws.send(json.dumps({"type": "register", "magic": "STKRELAY/1", "role": "commander",
                                      "kmsn": KMSN, "station": "C01", "auth": auth}))  # fmt: skip
            registered = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert registered["type"] == "registered" and registered["epoch"] == lease.epoch
            # Idle longer than redis-py's default 5 s socket timeout: the consumer must live on.
            await asyncio.sleep(6.5)
            await ws.send(json.dumps({"type": "send", "to": "S201", "data": {"from": "browser"}, "id": "m1"}))
            got = await agent.receive(timeout=10)
            assert (
                isinstance(got, Received) and got.data == {"from": "browser"} and got.sender_station == "C01"
            )
            await agent.send({"from": "tcp"})
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert msg["type"] == "message" and msg["data"] == {"from": "tcp"}
            assert msg["from"] == {"role": "agent", "station": "S201"}
        await agent.close()

    asyncio.run(scenario())
