"""WebSocket routes on real agents: a browser-style commander on /ws/relay/ and a
TCP agent exchange messages both ways through the one routing table."""

import asyncio
import json

import pytest
from harness import KMSN, TOKEN, listening, wait_until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from relay.client.discovery import Discovery
from relay.client.events import Received
from relay.client.relay_client import RelayClient
from relay.lease_file import lease_file
from relay.wire.auth import auth_digest

pytestmark = pytest.mark.agents


@pytest.mark.long
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
        discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
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


def test_a_websocket_that_stops_reading_is_closed_and_counted_and_never_stalls_the_others(site_factory):
    """relay/web/ws_flow.py: what the web process holds for one WebSocket is bounded; a reader
    that does not read is closed (4408) with a log line and a count, while a reader beside
    it gets every message, in order."""
    import socket

    from relay.web.ws_flow import SLOW

    site = site_factory(1, extra={"WEB_WS_MAX_BUFFER": str(2 << 20), "WEB_WS_MAX_MESSAGES": "512"})
    site.start()
    site.wait_leader(timeout=40)
    (agent,) = site.agents
    web_port = int(agent.setting("WEB_PORT"))
    wait_until(lambda: listening(agent.ip, int(agent.setting("RELAY_PORT"))), 10, "the relay")
    wait_until(lambda: listening(agent.ip, web_port), 20, "the web port")
    web, tls = f"{agent.ws_url}/ws/relay/", agent.web_ssl()
    count, pad = 800, "x" * 16000  # ~12.8 MB: well past the kernel's socket buffers and the bound
    in_flight = 100  # messages the commander keeps ahead of the reading one (see below)

    async def ws_agent(station: str, **kw):  # type: ignore[no-untyped-def]
        ws = await connect(web, open_timeout=10, max_size=None, ssl=tls, **kw)
        hello = json.loads(await asyncio.wait_for(ws.recv(), 10))
        auth = auth_digest(TOKEN, hello["nonce"], "agent", KMSN, station)
        await ws.send(json.dumps({"type": "register", "magic": "STKRELAY/1", "role": "agent",
                                  "kmsn": KMSN, "station": station, "auth": auth}))  # fmt: skip
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "registered"
        return ws

    async def scenario():  # type: ignore[no-untyped-def]
        tight = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tight.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        tight.connect((agent.ip, web_port))
        slow = await ws_agent("S301", sock=tight, max_queue=1)  # reads one message, then stops
        fast = await ws_agent("S302")
        discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
        commander = RelayClient(role="commander", kmsn=KMSN, station="C01", token=TOKEN, discovery=discovery)
        await commander.start(timeout=15)

        got: list[int] = []

        async def read_all() -> list[int]:
            while len(got) < count:
                msg = json.loads(await asyncio.wait_for(fast.recv(), 30))
                if msg.get("type") == "message":
                    got.append(msg["data"]["i"])
            return got

        reader = asyncio.create_task(read_all())
        for i in range(count):
            # The commander keeps at most in_flight messages (~1.6 MB) ahead of the reader that
            # reads, as a real one paced by its replies would: on a loaded machine an unpaced
            # burst of 12.8 MB puts the reading one past the relay's 4 MiB bound too (dropped,
            # its WebSocket closed 1000), which is that bound working, not what is tested here.
            # The slow one falls behind by all of it and is closed at its 2 MiB bound.
            async with asyncio.timeout(60):
                while i - len(got) > in_flight and not reader.done():
                    await asyncio.sleep(0.005)
            await commander.send({"i": i, "pad": pad}, to="*")
        assert await asyncio.wait_for(reader, 90) == list(range(count))
        await commander.close()
        await fast.close()
        # The slow one, read now: what the server had sent before closing it, then 4408 (or
        # nothing more, when the server gave up on the closing handshake first: Daphne then drops
        # the connection, and what the kernel still held for this reader with it).
        received = 0
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(slow.recv(), 30)
                received += 1
        assert closed.value.rcvd is None or closed.value.rcvd.code == SLOW
        return received

    received = asyncio.run(scenario())
    assert received < count
    with agent.urlopen("/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert 'stkrelay_websocket_drops_total{cause="buffer_bytes",route="relay"} 1.0' in metrics, [
        line for line in metrics.splitlines() if "websocket" in line
    ]
    assert "closed, too slow: buffer_bytes" in agent.log()


def test_a_real_agent_refuses_foreign_hosts_and_origins_and_takes_relay_clients_without_one(site_factory):
    """Item 1 of the security review, against Daphne with a real WebSocket client: the Host must
    be one of the agent's own names (NODE_IP, loopback, its host name, the VIP, WEB_ALLOWED_HOSTS);
    a browser Origin must be too; a client without Origin (not a browser) may use /ws/relay/,
    whose handshake authenticates it, but not /ws/stream/ (it rides on the session cookie)."""
    import socket
    import urllib.error
    import urllib.request

    from websockets.exceptions import InvalidStatus

    site = site_factory(1, extra={"WEB_ALLOWED_HOSTS": "panel.site.lan"})  # the VIP: test_panel_security
    site.start()
    site.wait_leader(timeout=40)
    (agent,) = site.agents
    web_port = int(agent.setting("WEB_PORT"))
    wait_until(lambda: listening(agent.ip, int(agent.setting("RELAY_PORT"))), 10, "the relay")
    wait_until(lambda: listening(agent.ip, web_port), 20, "the web port")
    base = f"{agent.ip}:{web_port}"

    def status(host: str) -> int:
        req = urllib.request.Request(f"{agent.web_url}/login/", headers={"Host": host})
        try:
            with agent.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    own = [base, f"localhost:{web_port}", f"{socket.gethostname()}:{web_port}", f"panel.site.lan:{web_port}"]
    assert {h: status(h) for h in own} == {h: 200 for h in own}
    assert status("evil.example") == status(f"10.9.9.9:{web_port}") == 400

    async def hello(path: str, origin: str | None) -> int | str:
        try:
            async with connect(f"{agent.ws_url}{path}", origin=origin, open_timeout=10,  # type: ignore[arg-type]
                               ssl=agent.web_ssl()) as ws:  # fmt: skip
                return json.loads(await asyncio.wait_for(ws.recv(), 10))["type"]
        except InvalidStatus as exc:
            return exc.response.status_code

    async def scenario():  # type: ignore[no-untyped-def]
        return {
            "relay, no Origin": await hello("/ws/relay/", None),
            "relay, own Origin": await hello("/ws/relay/", agent.web_url),
            "relay, foreign Origin": await hello("/ws/relay/", "http://evil.example"),
            "relay, Origin null": await hello("/ws/relay/", "null"),
            "stream, no Origin": await hello("/ws/stream/S001/", None),
            "stream, foreign Origin": await hello("/ws/stream/S001/", f"http://evil.example:{web_port}"),
        }

    assert asyncio.run(scenario()) == {
        "relay, no Origin": "hello",
        "relay, own Origin": "hello",
        "relay, foreign Origin": 403,
        "relay, Origin null": 403,
        "stream, no Origin": 403,
        "stream, foreign Origin": 403,
    }
    refused = "websocket /ws/relay/ from 127.0.0.1 refused: Origin 'http://evil.example' not allowed"
    assert refused in agent.log()
