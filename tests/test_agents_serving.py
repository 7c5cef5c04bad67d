"""The serving right on a real 3-agent site on loopback (docs/design.md §15, default
timing: TTL 10, beacons every 0.2 s): a frozen leader (SIGSTOP of its whole
agent: no evidence of death) is replaced within seconds, and woken it forwards
not one byte that its clients sent meanwhile; short freezes change nothing."""

import asyncio
import json
import os
import signal
import socket
import time

import pytest
from harness import DEFAULT, KMSN, TOKEN, listening, wait_until

from relay.client.discovery import Discovery
from relay.client.relay_client import RelayClient
from relay.lease_file import lease_file
from relay.wire.auth import auth_digest
from relay.wire.events import MAGIC
from relay.wire.framing import FrameDecoder, encode_frame

pytestmark = pytest.mark.agents
REPLACED_WITHIN = 9.0  # seconds, under load (the bench measures ~2-3 s); the reason asserted says: early
TTL, RENEW = float(DEFAULT["LEASE_TTL"]), float(DEFAULT["LEASE_RENEW"])


def serving(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text()).get("beacons", {}).get("serving") or {}
    except (OSError, ValueError):
        return {}


def adheres_by_acks(agent, node: str, epoch: int) -> bool:  # type: ignore[no-untyped-def]
    """This member acknowledges `node`'s `epoch`, and heard it say it serves by acks."""
    adh = serving(agent).get("adheres") or {}
    return (adh.get("node"), adh.get("epoch"), adh.get("mode")) == (node, epoch, "ack")


class Wire:
    """A registered relay client on a plain socket, talking to one relay whatever the lease says."""

    def __init__(self, ip: str, port: int, role: str, station: str) -> None:
        self.sock = socket.create_connection((ip, port), timeout=5)
        self.decoder, self.buf = FrameDecoder(1 << 20), bytearray()
        hello = self.frame()
        auth = auth_digest(TOKEN, hello["nonce"], role, KMSN, station)
        self.send({"type": "register", "magic": MAGIC, "role": role, "kmsn": KMSN, "station": station,
                   "auth": auth})  # fmt: skip
        reply = self.frame()
        assert reply is not None and reply["type"] == "registered", reply
        self.epoch = reply["epoch"]

    def send(self, obj: dict) -> None:
        self.sock.sendall(encode_frame(obj))

    def frame(self) -> dict | None:
        """The next frame, or None at the end of the connection."""
        while True:
            del self.buf[: self.decoder.feed(self.buf, max_frames=1)]
            for item in self.decoder.events():
                return item
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, TimeoutError):
                return None
            if not chunk:
                return None
            self.buf += chunk


@pytest.mark.long
def test_a_frozen_leader_is_replaced_within_seconds_and_woken_forwards_nothing(site_factory):
    site = site_factory(3, timing=DEFAULT)
    site.start()
    first = site.wait_settled(timeout=60)
    old = site.by_name(first.node)
    wait_until(
        lambda: (serving(old).get("right") or {}).get("mode") == "ack", 20, "the leader to serve by acks"
    )
    # And the followers to have heard it say so: only a holder that said it serves by acks may be
    # taken over early. Frozen before its first such beacon went out, it is taken over by the TTL
    # (safe, and the rule: CI froze one there once, and the new relay came after 9 s).
    followers = [a for a in site.agents if a is not old]
    wait_until(lambda: all(adheres_by_acks(f, old.name, first.epoch) for f in followers), 20,
               "the followers to hear the leader serve by acks")  # fmt: skip
    port = int(old.setting("RELAY_PORT"))
    # Serving by acks is said once the right is taken; its relay listens once the elected plan's
    # start_relay reached it (inotify, on a loaded machine not always before the followers heard).
    wait_until(lambda: listening(old.ip, port), 10, "the leader's relay to listen")
    sender, receiver = Wire(old.ip, port, "commander", "C01"), Wire(old.ip, port, "agent", "R01")
    sender.send({"type": "send", "to": "R01", "data": {"n": 0}, "id": "0"})
    assert (receiver.frame() or {}).get("data") == {"n": 0}

    async def frozen() -> float:
        discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
        fresh = RelayClient(role="agent", kmsn=KMSN, station="B01", token=TOKEN, discovery=discovery,
                            keepalive=1.0)  # fmt: skip
        await fresh.start(timeout=15)
        old.signal_group(signal.SIGSTOP)
        stopped = time.monotonic()
        while not (fresh.registered and (fresh.epoch or 0) > first.epoch):
            assert time.monotonic() - stopped < REPLACED_WITHIN, "no new leader's relay within the bound"
            await asyncio.sleep(0.02)
        took = time.monotonic() - stopped
        await fresh.close()
        return took

    took = asyncio.run(frozen())
    # The new relay serves. What the stale clients send now waits in the frozen host's sockets.
    for n in range(1, 11):
        sender.send({"type": "send", "to": "R01", "data": {"n": n}, "id": str(n)})
    old.signal_group(signal.SIGCONT)
    after = []
    while (frame := receiver.frame()) is not None:
        after.append(frame)
    assert [f for f in after if f.get("type") == "message"] == [], after
    assert [f.get("type") for f in after] in ([], ["leader_changed"]), after
    wait_until(lambda: old.state().get("leader") is False, 15, "the woken leader to step down")
    # ...and to follow at its next tick (LEASE_POLL 2 s): quiet at once (it hears the new leader's
    # beacons), it once kept "step_down" until news came, a LEASE_TTL or more later
    wait_until(lambda: old.state().get("decision", "").startswith("follow"), 6,
               f"the woken leader to follow: {old.state().get('decision')}")  # fmt: skip
    new = site.lease()
    assert new is not None and new.node != first.node and new.epoch > first.epoch
    winner = site.by_name(new.node)
    wait_until(lambda: ("elected", new.epoch) in [(k, e) for k, e, _ in winner.history()], 10, "the row")
    reasons = [r for k, e, r in winner.history() if (k, e) == ("elected", new.epoch)]
    assert "silent for" in reasons[0], reasons
    print(f"a new leader's relay registered a client {took:.2f} s after SIGSTOP of the old one")


@pytest.mark.long
def test_twenty_freezes_of_half_a_second_change_no_leader(site_factory):
    site = site_factory(3, timing=DEFAULT)
    site.start()
    first = site.wait_settled(timeout=60)
    leader = site.by_name(first.node)
    wait_until(
        lambda: (serving(leader).get("right") or {}).get("mode") == "ack", 20, "the leader to serve by acks"
    )
    for _ in range(20):
        leader.signal_group(signal.SIGSTOP)
        time.sleep(0.5)
        leader.signal_group(signal.SIGCONT)
        time.sleep(1.0)
        rec = site.lease()
        assert rec is not None and (rec.node, rec.epoch) == (first.node, first.epoch), rec
    time.sleep(3.0)  # a takeover decided during the last freeze would show by now
    rec = site.lease()
    assert rec is not None and (rec.node, rec.epoch) == (first.node, first.epoch), rec
    assert leader.state().get("leader") is True
    elected = [e for a in site.agents for k, e, _ in a.history() if k == "elected"]
    assert set(elected) == {first.epoch}, elected


@pytest.mark.long
def test_a_pool_of_two_serves_by_acks_with_the_shares_witness_and_its_panel_says_so(site_factory):
    """Issue 22 kept a 2-member pool on the TTL path ("fast takeover needs 3 members"); issue 38
    gives it the share's witness as the third vote: its leader serves by acks once the witness
    record names its epoch, and its page says what the fast takeover rests on. Its takeovers,
    freezes and a damaged witness: tests/test_agents_witness.py."""
    import re
    import shutil

    import test_panel_support
    from test_panel_support import client_for, make_user

    site = site_factory(2, timing=DEFAULT)
    site.start()
    first = site.wait_settled(timeout=60)
    leader = site.by_name(first.node)
    follower = next(a for a in site.agents if a is not leader)
    for agent in site.agents:  # each counts both members (beacons heard, heartbeats seen)
        wait_until(lambda a=agent: serving(a).get("members") == 2, 20, f"{agent.name} to count 2 members")
    wait_until(
        lambda: (serving(leader).get("right") or {}).get("mode") == "ack", 20, "the leader to serve by acks"
    )
    assert serving(leader)["fast"] is True and (serving(leader).get("witness") or {}).get("ready") is True
    wait_until(lambda: adheres_by_acks(follower, first.node, first.epoch), 10, "the follower's ack")
    # The panel, given the leader's pool view as its worker wrote it.
    paths = test_panel_support.django_env()
    shutil.copy(leader.data_dir / "pool.json", paths["data_dir"] / "pool.json")
    try:
        page = re.sub(r"\s+", " ", client_for(make_user("vera2")).get(f"/sites/{KMSN}/").content.decode())
    finally:
        (paths["data_dir"] / "pool.json").unlink(missing_ok=True)
    said = '<span data-fast-takeover="1">fast takeover: 2 members + the share\'s witness</span>'
    at = page.find("data-fast-takeover")
    assert said in page, page[at - 60 : at + 200]


@pytest.mark.long
def test_a_frozen_leader_behind_a_damaged_lease_is_taken_over_by_the_ttl_not_early(site_factory):
    """Issue 22: an early takeover needs a valid read of the silent leader's lease. The leader
    freezes and the lease file is cut short (a writer of the share without the key): the
    followers' majority is silent about it, but every read is no evidence — each defers the
    takeover (counted in pool.json) — and the TTL of the last valid lease decides, as before."""
    site = site_factory(3, timing=DEFAULT)
    site.start()
    first = site.wait_settled(timeout=60)
    old = site.by_name(first.node)
    wait_until(
        lambda: (serving(old).get("right") or {}).get("mode") == "ack", 20, "the leader to serve by acks"
    )
    others = [a for a in site.agents if a is not old]
    wait_until(lambda: all((serving(a).get("adheres") or {}).get("mode") == "ack" for a in others), 20,
               "the followers to hear that the leader serves by acks")  # fmt: skip
    lease_file = site.lease_dir / "relay_leader.json"
    old.signal_group(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        good = lease_file.read_bytes()
        junk = site.lease_dir / ".junk.tmp"
        junk.write_bytes(good[: len(good) // 2])
        os.replace(junk, lease_file)

        def deferred():  # type: ignore[no-untyped-def]
            return [(serving(a).get("deferred") or {}).get("corrupt", 0) for a in others]

        wait_until(lambda: all(deferred()), 8, "both followers to defer the takeover on the damaged lease")
        assert time.monotonic() - stopped < TTL - RENEW, "deferred only once the TTL was near"
        assert lease_file.read_bytes() == good[: len(good) // 2], "someone took the lease early"
        new = site.wait_leader(timeout=TTL + 10, other_than=first.node, min_epoch=first.epoch + 1)
        took = time.monotonic() - stopped
        assert took >= TTL - RENEW - 1.0, f"taken over {took:.2f} s after SIGSTOP: early"
        winner = site.by_name(new.node)
        wait_until(lambda: ("elected", new.epoch) in [(k, e) for k, e, _ in winner.history()], 10, "the row")
        reasons = [r for k, e, r in winner.history() if (k, e) == ("elected", new.epoch)]
        assert "expired" in reasons[0] and "silent for" not in reasons[0], reasons
    finally:
        old.signal_group(signal.SIGCONT)
    print(f"taken over by the TTL {took:.2f} s after SIGSTOP behind a damaged lease; deferred {deferred()}")
