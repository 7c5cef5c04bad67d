"""`relayclient --discover` steered by forged beacons (relay/client/beacon_discovery.py,
docs/design.md §13; issue 28 item 5.4), on loopback with a real `RelayServer`:
leader beacons naming an attacker's address — signed with another key,
unsigned, or a validly signed beacon of an old epoch replayed from when that
address was a member's — send the client there once at most. The attacker
cannot prove the key in the handshake (cnonce/sauth), learns no secret, is
avoided and counted, and the client registers with the real relay."""

from __future__ import annotations

import asyncio
import contextlib
import json

from harness import free_port
from test_relay_client import KMSN, TOKEN, Pool, play, until
from test_relay_trust import HOST_ROGUE, client, real_relay

from elections.core.beacons import Beacon
from relay.client.beacon_discovery import BeaconListener
from relay.client.discovery import Discovery
from relay.wire.auth import new_nonce
from relay.wire.events import MAGIC
from relay.wire.framing import encode_frame

HOST_LISTEN = "127.0.0.75"
OTHER_KEY = "not-the-site-token-0123456789"


class Thief:
    """A server at the address the forged beacons name: it says hello, keeps
    whatever the client sends, and claims a registration it cannot prove."""

    def __init__(self) -> None:
        self.received = b""
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.address = ("", 0)

    async def start(self) -> Thief:
        self.server = await asyncio.start_server(self._serve, HOST_ROGUE, 0)
        self.address = self.server.sockets[0].getsockname()[:2]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            writer.write(encode_frame({"type": "hello", "magic": MAGIC, "epoch": 10**9, "node": "S666",
                                       "nonce": new_nonce()}))  # fmt: skip
            self.received += await asyncio.wait_for(reader.read(1 << 16), 2)
            writer.write(
                encode_frame({"type": "registered", "epoch": 10**9, "session": "x", "sauth": "ab" * 32})
            )
            await writer.drain()
            self.received += await asyncio.wait_for(reader.read(1 << 16), 2)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


def beacon(ip: str, port: int, epoch: int, key: str | None, seq: int) -> bytes:
    raw = Beacon(KMSN, "S071", ip, port, "leader", epoch, 1, "7" * 16, seq).encode(key or OTHER_KEY)
    if key is None:  # unsigned: the same fields without the signature
        doc = json.loads(raw)
        del doc["sig"]
        raw = json.dumps(doc).encode()
    return raw


def test_forged_unsigned_and_replayed_leader_beacons_never_get_a_client_registered_elsewhere(tmp_path):
    port = free_port(HOST_LISTEN)

    async def body(pool: Pool) -> None:
        real = await real_relay(pool)  # S071, epoch 7
        thief = await Thief().start()
        old = beacon(*thief.address, epoch=5, key=TOKEN, seq=1)  # S071's, from when it had that address
        lies = [old, beacon(*thief.address, 99, OTHER_KEY, 2), beacon(*thief.address, 99, None, 3)]
        truth = beacon(*real.addresses["json"], epoch=7, key=TOKEN, seq=4)
        loop = asyncio.get_running_loop()
        sender, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.76", 0)
        )

        async def send() -> None:
            while True:
                for raw in lies + ([truth] if thief.connections else []):
                    sender.sendto(raw, (HOST_LISTEN, port))
                await asyncio.sleep(0.05)

        beacons = BeaconListener(TOKEN, KMSN, port, wait=1.0, bind=HOST_LISTEN)
        sending = asyncio.create_task(send())
        try:
            c = client(pool, "S002", Discovery([beacons]))
            await c.start(timeout=15)
            assert (c.node, c.epoch) == ("S071", 7)
            assert thief.connections == 1 and thief.address in c._follower.distrusted
            assert c.counters.unproven == 1
            assert TOKEN.encode() not in thief.received and b"register" in thief.received
            assert beacons.refused["forged"] >= 1 and beacons.refused["unsigned"] >= 1
            # A blip later it finds the real relay again, never the thief.
            next(p for p in real.peers if p.station == "S002").drop("test: a blip")
            await until(lambda: c.counters.reconnects == 1 and c.registered, 10, "the client to come back")
            assert thief.connections == 1 and c.epoch == 7
        finally:
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sending
            sender.close()
            assert thief.server is not None
            thief.server.close()

    play(tmp_path, body)
