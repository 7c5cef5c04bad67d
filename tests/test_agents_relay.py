"""The relay on a real 3-agent site: leader-only, clients follow it on their own."""

import asyncio
import json
import signal
import socket
import time

import pytest
from harness import KMSN, TOKEN, listening, wait_until

from relay.client.discovery import Discovery
from relay.client.events import Received
from relay.client.relay_client import RelayClient
from relay.lease_file import lease_file

pytestmark = pytest.mark.agents


def relay_port(site) -> int:
    return int(site.agents[0].setting("RELAY_PORT"))


def client(site, role, station):
    discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
    return RelayClient(role=role, kmsn=KMSN, station=station, token=TOKEN, discovery=discovery,
                       keepalive=1.0)  # fmt: skip


@pytest.mark.long
def test_only_the_leader_relays_and_clients_follow_a_kill_9_within_ttl_plus_3s(site_factory):
    site = site_factory(3)  # TTL 3, renew 1, poll 0.5, deadline 2
    site.start()
    first = site.wait_leader(timeout=40)
    port = relay_port(site)
    leader = site.by_name(first.node)
    wait_until(lambda: listening(leader.ip, port), 10, "the leader's relay to listen")
    assert not any(listening(a.ip, port) for a in site.agents if a is not leader)

    async def scenario():
        cmd, s101, s102 = (
            client(site, "commander", "C01"),
            client(site, "agent", "S101"),
            client(site, "agent", "S102"),
        )
        for c in (cmd, s101, s102):
            await c.start(timeout=15)
        assert {c.epoch for c in (cmd, s101, s102)} == {first.epoch}
        await cmd.send({"n": 0}, to="S101")
        got = await s101.receive(timeout=5)
        assert isinstance(got, Received) and got.data == {"n": 0} and got.sender_station == "C01"

        leader.kill9()
        killed = time.monotonic()
        for n in range(1, 6):  # sent during the gap: queued, delivered after it
            await s102.send({"n": n})
        while not all(c.registered and (c.epoch or 0) > first.epoch for c in (cmd, s101, s102)):
            assert time.monotonic() - killed < 3 + 3, "clients not re-registered within LEASE_TTL + 3 s"
            await asyncio.sleep(0.05)
        gap = time.monotonic() - killed
        received = []
        while len(received) < 5:
            item = await cmd.receive(timeout=10)
            if isinstance(item, Received):
                received.append(item.data["n"])
        assert received == [1, 2, 3, 4, 5]
        for c in (cmd, s101, s102):
            await c.close()
        return gap

    gap = asyncio.run(scenario())
    new = site.lease()
    assert new is not None and new.epoch == first.epoch + 1, new
    assert listening(site.by_name(new.node).ip, port)
    print(f"clients re-registered {gap:.2f} s after the kill")


@pytest.mark.long
def test_a_frozen_leader_registers_no_client_after_it_wakes(site_factory):
    site = site_factory(3)
    site.start()
    first = site.wait_leader(timeout=40)
    port = relay_port(site)
    old = site.by_name(first.node)
    wait_until(lambda: listening(old.ip, port), 10, "the relay to listen")
    old.signal_group(signal.SIGSTOP)
    frozen = time.monotonic()
    new = site.wait_leader(timeout=15, other_than=first.node)
    time.sleep(max(0.0, frozen + 2 * 3 - time.monotonic()))
    old.signal_group(signal.SIGCONT)
    # From the moment it wakes, a registration attempt on the old leader is refused or
    # the port is gone; never "registered".
    from relay.wire.client_connection import ClientConnection
    from relay.wire.events import Registered

    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            s = socket.create_connection((old.ip, port), timeout=1)
        except OSError:
            break  # the listener is gone: nothing can register
        conn = ClientConnection(role="agent", kmsn=KMSN, station="S109", token=TOKEN)
        s.settimeout(2)
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                conn.receive_data(data)
                out = conn.data_to_send()
                if out:
                    s.sendall(out)
                events = conn.events_received()
                assert not any(isinstance(e, Registered) for e in events), "a woken old leader registered"
                if conn.close_expected() or any(getattr(e, "code", None) for e in events):
                    break
        except OSError:
            pass
        finally:
            s.close()
        time.sleep(0.1)
    wait_until(lambda: not listening(old.ip, port), 5, "the old leader's listener to close")
    assert listening(site.by_name(new.node).ip, port)
    rel = json.loads((site.by_name(new.node).data_dir / "relay.json").read_text())
    assert rel["epoch"] == new.epoch and rel["listening"]
