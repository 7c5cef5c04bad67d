"""The ``/ws/relay/`` bridge names each browser to the relay (issue 40 finding 4): a real relay
on its own loop, the ASGI app driven by Channels' communicator with the browser's address
in the scope, as Daphne puts it there."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import test_panel_support
from channels.testing import WebsocketCommunicator
from test_relay_server import Relay as ThreadRelay

from relay.server.limits import Caps
from relay.wire.auth import auth_digest
from relay.wire.events import MAGIC

dj = test_panel_support.dj
RELAY_TOKEN = "relay-test-token"  # test_relay_server's relay
ATTACKER = "203.0.113.66"


class Browser(WebsocketCommunicator):
    """A WebSocket client at `client`, as the ASGI server's scope names it."""

    def __init__(self, application: Any, client: tuple[str, int]) -> None:
        self.client_address = client
        super().__init__(application, "/ws/relay/", headers=[(b"host", b"127.0.0.1:8000")])

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "scope" and isinstance(value, dict):
            value = {**value, "client": list(self.client_address), "server": ["127.0.0.1", 8000]}
        super().__setattr__(name, value)


@pytest.fixture
def bridge(dj, monkeypatch):
    from django.conf import settings
    from django.test import override_settings

    relay = ThreadRelay(pool_key=settings.STK.pool_key, caps=Caps(total=200, preauth=100, per_address=5))

    async def address() -> tuple[str, int]:
        return relay.json

    monkeypatch.setattr("relay.web.ws.relay_address", address)
    layers = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    with override_settings(CHANNEL_LAYERS=layers):
        yield relay
    relay.stop()


async def register(comm: Browser, station: str) -> dict:
    hello = json.loads(await comm.receive_from(timeout=5))
    kmsn = "9999-9999-99-99"
    auth = auth_digest(RELAY_TOKEN, hello["nonce"], "commander", kmsn, station)
    await comm.send_to(text_data=json.dumps({"type": "register", "magic": MAGIC, "role": "commander",
                                             "kmsn": kmsn, "station": station, "auth": auth}))  # fmt: skip
    return json.loads(await comm.receive_from(timeout=5))  # type: ignore[no-any-return]


def test_browsers_are_counted_by_their_own_address_behind_the_bridge(bridge):
    from stkrelay.asgi import application

    async def main() -> None:
        idle = []
        for n in range(8):  # one keyless host: its sixth and later are refused, nobody else's
            comm = Browser(application, (ATTACKER, 40000 + n))
            assert (await comm.connect(timeout=5))[0]
            idle.append(comm)
        await wait(lambda: bridge.snapshot()["admission"]["refused"]["per_address"] == 3)
        browsers = []
        for n in range(10):  # ten browsers, more than one address may hold: all register
            comm = Browser(application, (f"198.51.100.{n + 1}", 50000))
            assert (await comm.connect(timeout=5))[0]
            assert (await register(comm, f"C{n:02d}"))["type"] == "registered"
            browsers.append(comm)
        peers = {c["station"]: c["peer"] for c in bridge.snapshot()["clients"]}
        assert len(peers) == 10 and all(" via 127.0.0." in p for p in peers.values())
        assert all(peers[f"C{n:02d}"].startswith(f"198.51.100.{n + 1}:50000 via ") for n in range(10))
        for comm in idle + browsers:
            await comm.disconnect()

    asyncio.run(main())


async def wait(cond: Any, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await asyncio.to_thread(cond):
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.02)
