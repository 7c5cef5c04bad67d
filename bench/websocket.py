"""WebSocket throughput: a commander on /ws/relay/ (Daphne, the Channels bridge)
sends to a TCP agent through a real agent's relay, and back.

    python bench/websocket.py [--messages 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import FAST, KMSN, TOKEN, Site, listening, wait_until  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from relay.wire.auth import auth_digest  # noqa: E402
from relay.wire.client_connection import ClientConnection  # noqa: E402
from relay.wire.events import Message, Registered  # noqa: E402

WINDOW = 256  # messages in flight


async def tcp_agent(
    ip: str, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, ClientConnection]:
    reader, writer = await asyncio.open_connection(ip, port)
    conn = ClientConnection(role="agent", kmsn=KMSN, station="S401", token=TOKEN)
    while True:
        conn.receive_data(await reader.read(65536))
        writer.write(conn.data_to_send())
        if any(isinstance(e, Registered) for e in conn.events_received()):
            return reader, writer, conn


async def run(site: Site, n: int) -> None:
    agent = site.agents[0]
    port = int(agent.setting("RELAY_PORT"))
    reader, writer, conn = await tcp_agent(agent.ip, port)
    async with connect(f"{agent.ws_url}/ws/relay/", max_queue=None, ssl=agent.web_ssl()) as ws:
        hello = json.loads(await ws.recv())
        auth = auth_digest(TOKEN, hello["nonce"], "commander", KMSN, "C01")
        await ws.send(
            json.dumps(
                {
                    "type": "register",
                    "magic": "STKRELAY/1",
                    "role": "commander",
                    "kmsn": KMSN,
                    "station": "C01",
                    "auth": auth,
                }
            )
        )
        assert json.loads(await ws.recv())["type"] == "registered"

        # WebSocket commander -> TCP agent
        got = 0
        done = asyncio.Event()

        async def tcp_reader() -> None:
            nonlocal got
            while got < n:
                conn.receive_data(await reader.read(1 << 16))
                got += sum(isinstance(e, Message) for e in conn.events_received())
            done.set()

        task = asyncio.create_task(tcp_reader())
        frame = json.dumps({"type": "send", "to": "S401", "data": {"x": "y" * 100}})
        start = time.perf_counter()
        for i in range(n):
            while i - got > WINDOW:
                await asyncio.sleep(0)
            await ws.send(frame)
        await asyncio.wait_for(done.wait(), 120)
        ws_to_tcp = n / (time.perf_counter() - start)
        await task

        # TCP agent -> WebSocket commander
        start = time.perf_counter()
        received = 0
        sent = 0
        while received < n:
            while sent < n and sent - received < WINDOW:
                conn.send_message({"x": "y" * 100})
                sent += 1
            writer.write(conn.data_to_send())
            await ws.recv()
            received += 1
        tcp_to_ws = n / (time.perf_counter() - start)
    writer.close()
    print(f"websocket: {n} messages of ~130 bytes, {WINDOW} in flight, via {agent.name}'s Daphne bridge")
    print(f"  WebSocket commander -> TCP agent: {ws_to_tcp:9,.0f} msg/s")
    print(f"  TCP agent -> WebSocket commander: {tcp_to_ws:9,.0f} msg/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stk-ws-") as tmp:
        site = Site(Path(tmp) / "site", n=1, timing=FAST)
        try:
            site.start()
            site.wait_leader(timeout=60)
            a = site.agents[0]

            wait_until(
                lambda: (
                    listening(a.ip, int(a.setting("RELAY_PORT")))
                    and listening(a.ip, int(a.setting("WEB_PORT")))
                ),
                30,
                "relay and web",
            )
            asyncio.run(run(site, args.messages))
        finally:
            site.stop()


if __name__ == "__main__":
    main()
