"""Issue 40 against a real 3-agent site: a site-token holder registering 1,000 names of any length
forced leader changes (relay.json grew past the read limit, read as {}, and the leader's own health
said "relay not running"); a keyless host's surrogates wrote a traceback each. Now names are bounded
at registration, the snapshot is bounded in bytes, and the health is a record of its own."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time

import pytest
from harness import KMSN, TOKEN, listening, wait_until
from websockets.asyncio.client import connect

from elections.ports.local.localstate import MAX_LOCAL_FILE, RELAY_HEALTH_NAME, RELAY_NAME
from relay.wire.auth import auth_digest
from relay.wire.events import MAGIC, MAX_NAME
from relay.wire.framing import FrameDecoder, encode_frame

pytestmark = [pytest.mark.agents, pytest.mark.long]

ALPHABET = "S0123456789abcdefXYZ 站台驛\U0001f600\U0001f680é"  # printable, 1 to 4 UTF-8 bytes each


def names(n: int, seed: int = 40) -> list[str]:
    """`n` names, about half within the bound and half beyond it (up to 15,000 characters)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.randint(1, MAX_NAME) if i % 2 else rng.choice([MAX_NAME + 1, rng.randint(65, 15_000)])
        out.append(f"{i:03d}"[:size] + "".join(rng.choice(ALPHABET) for _ in range(size - min(3, size))))
    return out


def answers(sock: socket.socket, decoder: FrameDecoder, want: int) -> list[dict]:
    got: list = []
    while len(got) < want:
        data = sock.recv(1 << 16)
        assert data, f"closed after {got}"
        decoder.feed(data)
        got += decoder.events()
    return got


def register(address: tuple[str, int], station: str) -> dict:
    """One site-token holder's register as `station`: the relay's answer."""
    with socket.create_connection(address, timeout=10) as sock:
        decoder = FrameDecoder(64 << 20)
        (hello,) = answers(sock, decoder, 1)
        auth = auth_digest(TOKEN, hello["nonce"], "agent", KMSN, station)
        sock.sendall(encode_frame({"type": "register", "magic": MAGIC, "role": "agent", "kmsn": KMSN,
                                   "station": station, "auth": auth}))  # fmt: skip
        (answer,) = answers(sock, decoder, 1)
        return answer


def settled_site(site_factory):  # type: ignore[no-untyped-def]
    """A 3-agent site with a leader serving: the site, its lease, the leader, its relay's address."""
    site = site_factory(3)
    site.start()
    lease = site.wait_settled(timeout=60)
    leader = site.by_name(lease.node)
    address = (leader.ip, int(leader.setting("RELAY_PORT")))
    wait_until(lambda: listening(*address), 10, "the leader's relay")
    return site, lease, leader, address


def test_a_site_token_holder_registering_1000_names_of_any_length_moves_no_leader(site_factory):
    site, lease, leader, address = settled_site(site_factory)
    epochs_seen = {lease.epoch}
    refused = admitted = 0
    for station in names(1000):
        answer = register(address, station)
        if len(station) > MAX_NAME:
            assert answer["type"] == "error" and answer["code"] == "bad_request", (len(station), answer)
            refused += 1
        else:
            assert answer["type"] == "registered", (station, answer)
            admitted += 1
        if refused % 50 == 0:
            epochs_seen.add(site.lease().epoch)
    assert refused >= 400 and admitted >= 400
    # The relay writes its status every second and the leader judges it as often: watch that long.
    data_dir = leader.data_dir
    until = time.monotonic() + 6
    while time.monotonic() < until:
        current = site.lease()
        assert current is not None
        epochs_seen.add(current.epoch)
        time.sleep(0.2)
    assert epochs_seen == {lease.epoch} and site.lease().node == lease.node, "a leader change"
    snapshot = json.loads((data_dir / RELAY_NAME).read_bytes())["snapshot"]
    assert (data_dir / RELAY_NAME).stat().st_size < MAX_LOCAL_FILE
    assert snapshot["refusals"]["bad_request"] == refused
    assert len(snapshot["stations"]["token"]) <= 512 and snapshot["stations"]["untracked"] >= 0
    health = json.loads((data_dir / RELAY_HEALTH_NAME).read_bytes())
    assert health["listening"] is True and health["epoch"] == lease.epoch
    assert "relay not running" not in leader.log()


def test_keyless_surrogates_on_the_relay_and_the_ws_bridge_are_refused_quietly(site_factory):
    site, lease, leader, address = settled_site(site_factory)
    lone = '"\\ud800"'
    for i in range(1000):
        with socket.create_connection(address, timeout=10) as sock:
            decoder = FrameDecoder()
            answers(sock, decoder, 1)
            text = f'{{"type":"register","magic":"{MAGIC}","role":"agent","kmsn":"{KMSN}","station":{lone},'
            payload = (text + f'"auth":"{"0" * 64}"}}').encode()
            sock.sendall(len(payload).to_bytes(4, "big") + payload)
            (answer,) = answers(sock, decoder, 1)
            assert answer["code"] == "bad_json", (i, answer)

    # The bridge: a browser's text message goes to the relay as it is; the relay judges it.
    follower = next(a for a in site.agents if a is not leader)
    wait_until(lambda: listening(follower.ip, int(follower.setting("WEB_PORT"))), 20, "the follower's web")

    async def bridge(text_of) -> dict:  # type: ignore[no-untyped-def]
        async with connect(f"{follower.ws_url}/ws/relay/", open_timeout=10, ssl=follower.web_ssl()) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 10))
            await ws.send(text_of(hello["nonce"]))
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    def with_surrogate(nonce: str) -> str:
        auth = auth_digest(TOKEN, nonce, "commander", KMSN, "C01")
        return (f'{{"type":"register","magic":"{MAGIC}","role":"commander","kmsn":"{KMSN}",'
                f'"station":"C01\\udfff","auth":"{auth}"}}')  # fmt: skip

    def too_long(nonce: str) -> str:
        station = "C" * (MAX_NAME + 1)
        auth = auth_digest(TOKEN, nonce, "commander", KMSN, station)
        return json.dumps({"type": "register", "magic": MAGIC, "role": "commander", "kmsn": KMSN,
                           "station": station, "auth": auth})  # fmt: skip

    assert asyncio.run(bridge(with_surrogate))["code"] == "bad_json"
    assert asyncio.run(bridge(too_long))["code"] == "bad_request"

    wait_until(lambda: json.loads((leader.data_dir / RELAY_NAME).read_bytes())["snapshot"].get("refusals", {})
               .get("bad_json") == 1001, 10, "relay.json to count every refusal")  # fmt: skip
    assert site.lease().epoch == lease.epoch
    logs = {a.name: a.log() for a in site.agents}
    assert not any("Traceback" in text for text in logs.values()), site.logs()
    told = [line for line in logs[leader.name].splitlines() if "bad_json" in line]
    assert 1 <= len(told) <= 3, told  # the first ones and "further ... summed up"
