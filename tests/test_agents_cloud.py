"""The cloud rendezvous relay (docs/design.md §14) with a real 3-agent site: remote clients
follow the site's leader through its tunnel, and the cloud fences tunnels by epoch."""

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time

import pytest
from cloudproc import CLOUD_TOKEN, LEASE_KEY, CloudProc
from harness import KMSN, ROOT, TOKEN, listening, wait_until

from relay.client.discovery import Discovery
from relay.client.events import Received
from relay.client.relay_client import RelayClient
from relay.cloud.fence import overlaps
from relay.lease_file import lease_file
from relay.wire.auth import new_nonce
from relay.wire.client_connection import ClientConnection
from relay.wire.events import ErrorReceived, Registered
from relay.wire.lease_mac import presented

pytestmark = pytest.mark.agents


@pytest.fixture
def cloud(tmp_path):
    proc = CloudProc(tmp_path / "cloud")
    proc.start()
    yield proc
    proc.stop()


def remote(cloud, role, station):
    discovery = Discovery.build(kmsn=KMSN, fallbacks=[(cloud.ip, cloud.relay_port)])
    return RelayClient(role=role, kmsn=KMSN, station=station, token=TOKEN, discovery=discovery, keepalive=1.0)


def local(site, role, station):
    discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
    return RelayClient(role=role, kmsn=KMSN, station=station, token=TOKEN, discovery=discovery, keepalive=1.0)


def relayctl(agent, *args):
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", *args, "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def tunnel_of(agent):
    try:
        doc = json.loads((agent.data_dir / "relay.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc.get("snapshot", {}).get("tunnel") or {} if doc.get("listening") else {}


async def flows(cmd, agent, n, timeout, epoch=0):
    """Time until a remote commander's message reaches `agent` (retrying until it does), both
    registered with `epoch` or later: through the new leader, not a late old one."""
    started = time.monotonic()
    tries = 0
    while time.monotonic() - started < timeout:
        if (
            (cmd.epoch or 0) < epoch
            or (agent.epoch or 0) < epoch
            or not (cmd.registered and agent.registered)
        ):
            await asyncio.sleep(0.005)
            continue
        tries += 1
        try:
            await cmd.send_confirmed({"n": n}, to=agent.station, id=f"m{n}-{tries}", timeout=0.5)
        except Exception:
            await asyncio.sleep(0.02)
            continue
        try:
            while True:
                got = await agent.receive(timeout=1)
                if isinstance(got, Received) and got.data == {"n": n}:
                    return time.monotonic() - started
        except TimeoutError:
            continue
    raise AssertionError(f"message {n} did not flow within {timeout} s")


def raw_register(ip, port, role, station, token=TOKEN):
    """A passthrough connection registered as (role, station); returns the socket and leftover bytes."""
    s = socket.create_connection((ip, port), timeout=5)
    conn = ClientConnection(
        role=role, kmsn=KMSN, station=station, token=token, raw_mode=True, cnonce=new_nonce()
    )
    while True:
        data = s.recv(65536)
        assert data, "closed during the handshake"
        conn.receive_data(data)
        out = conn.data_to_send()
        if out:
            s.sendall(out)
        events = conn.events_received()
        assert not any(isinstance(e, ErrorReceived) for e in events), events
        if any(isinstance(e, Registered) for e in events):
            assert conn.proven  # the site's leader proved it knows the key, through the cloud
            rest = b"".join(e.data for e in events if hasattr(e, "data") and isinstance(e.data, bytes))
            return s, rest


def test_remote_clients_follow_a_drain_and_a_kill_9_of_the_leader_through_the_cloud(site_factory, cloud):
    site = site_factory(3, extra=cloud.site_extra())
    site.start()
    first = site.wait_settled()
    leader = site.by_name(first.node)
    wait_until(lambda: cloud.tunnel_epoch() == first.epoch, 15, "the leader's tunnel at the cloud")
    # relay.json is rewritten every 0.5 s: the leader's own account catches up.
    wait_until(lambda: tunnel_of(leader).get("connected"), 5, "relay.json to show the tunnel connected")
    assert tunnel_of(leader)["epoch"] == first.epoch and tunnel_of(leader)["url"] == cloud.url
    port = int(leader.setting("RELAY_PORT"))

    # Passthrough: a site publisher, a remote viewer on the cloud.
    viewer, rest = raw_register(cloud.ip, cloud.relay_port + 1, "viewer", "CAM1")
    publisher, _ = raw_register(leader.ip, port + 1, "publisher", "CAM1")
    payload = bytes(range(256)) * 256
    publisher.sendall(payload)
    got = bytearray(rest)
    while len(got) < len(payload):
        chunk = viewer.recv(65536)
        assert chunk, "the remote viewer was closed"
        got += chunk
    assert bytes(got) == payload
    viewer.close()
    publisher.close()

    async def scenario():
        cmd, s101 = remote(cloud, "commander", "C01"), local(site, "agent", "S101")
        await cmd.start(timeout=15)
        await s101.start(timeout=15)
        assert cmd.epoch == first.epoch
        await flows(cmd, s101, 0, 5)
        await s101.send({"up": 1})  # agent -> remote commander
        got = await cmd.receive(timeout=5)
        assert isinstance(got, Received) and got.data == {"up": 1} and got.sender_station == "S101"

        # Drain: measured from the new leader serving (its relay listening) to a remote message flowing.
        relayctl(next(a for a in site.agents if a is not leader), "drain", first.node)
        second = await asyncio.to_thread(site.wait_leader, 15, first.node)
        new = site.by_name(second.node)
        await asyncio.to_thread(wait_until, lambda: listening(new.ip, port, 0.1), 10, "the new relay", 0.01)
        serving = time.monotonic()
        await flows(cmd, s101, 1, 10, epoch=second.epoch)
        drain_gap = time.monotonic() - serving
        assert cmd.epoch == second.epoch
        # The new leader's tunnel opened within 1 s of its relay serving (the cloud's loop.time()
        # is this host's CLOCK_MONOTONIC, like time.monotonic() here).
        opened = next(r["opened"] for r in cloud.status()["tunnels"] if r["epoch"] == second.epoch)
        assert opened - serving < 1.0, opened - serving

        # kill -9 of the leader: the site's own failover (a local client re-registered) + 2 s.
        new.kill9()
        killed = time.monotonic()
        while not (s101.registered and (s101.epoch or 0) > second.epoch):
            assert time.monotonic() - killed < 15
            await asyncio.sleep(0.02)
        site_failover = time.monotonic() - killed
        await flows(cmd, s101, 2, 15, epoch=second.epoch + 1)
        remote_recovery = time.monotonic() - killed
        for c in (cmd, s101):
            await c.close()
        return drain_gap, site_failover, remote_recovery, second

    drain_gap, site_failover, remote_recovery, second = asyncio.run(scenario())
    print(f"drain: remote flow {drain_gap:.2f} s after the new leader served; kill -9: site failover "
          f"{site_failover:.2f} s, remote flow {remote_recovery:.2f} s")  # fmt: skip
    assert drain_gap < 1.0 + 0.5, drain_gap  # 1 s, and 0.5 s for a machine shared with other tests
    assert remote_recovery < site_failover + 2.0 + 0.5, (site_failover, remote_recovery)
    status = cloud.status()
    records = status["tunnels"]
    assert [r["epoch"] for r in records] == sorted(r["epoch"] for r in records)
    assert overlaps(records) == [], records  # one tunnel per KMSN at any instant
    third = site.lease()
    assert status["pools"][KMSN]["epoch"] == third.epoch
    # Only leaders dialled out: each epoch's tunnel came from that epoch's leader, no one else.
    holders = {first.epoch: first.node, second.epoch: second.node, third.epoch: third.node}
    assert {(r["epoch"], r["node"]) for r in records} == set(holders.items()), records


@pytest.mark.long
def test_a_frozen_leader_woken_cannot_bring_its_old_epoch_back_and_forged_tunnels_are_refused(
    site_factory, tmp_path
):
    # Silence closes a tunnel after 3 x 10 s: the frozen leader's is still open when the new one comes.
    cloud = CloudProc(tmp_path / "cloud", keepalive=10)
    cloud.start()
    try:
        frozen_leader_scenario(site_factory, cloud)
    finally:
        cloud.stop()


def frozen_leader_scenario(site_factory, cloud):
    site = site_factory(3, extra=cloud.site_extra())
    site.start()
    first = site.wait_settled()
    old = site.by_name(first.node)
    wait_until(lambda: cloud.tunnel_epoch() == first.epoch, 15, "the leader's tunnel at the cloud")
    old_lease = json.loads(first.encode(TOKEN))

    old.signal_group(signal.SIGSTOP)
    try:
        new = site.wait_leader(timeout=20, other_than=first.node)
        wait_until(lambda: cloud.tunnel_epoch() == new.epoch, 15, "the new leader's tunnel at the cloud")
        records = cloud.status()["tunnels"]
        replaced = [r for r in records if r["epoch"] == first.epoch]
        assert replaced and replaced[0]["closed"] is not None and "replaced" in replaced[0]["reason"]
    finally:
        old.signal_group(signal.SIGCONT)
    # The woken leader's relay sees its deadline passed and stops; whatever it still sends
    # or dials never reaches the site's remote clients: the cloud holds epoch `new`.
    time.sleep(3)
    status = cloud.status()
    assert status["pools"][KMSN]["tunnel"]["epoch"] == new.epoch
    assert overlaps(status["tunnels"]) == []
    assert all(r["epoch"] == new.epoch for r in status["tunnels"] if r["closed"] is None)

    # The cloud's LEASE_KEY is what `relayctl cloud-key` prints on any agent of the site.
    assert relayctl(old, "cloud-key")["lease_key"] == LEASE_KEY
    # A tunnel with the old epoch's genuine signed lease and the right token: stale_epoch.
    assert tunnel_attempt(cloud, first.node, first.epoch, old_lease) == "stale_epoch"
    # A holder of CLOUD_TOKEN without the pool key, with a made-up higher epoch: refused, counted.
    made_up = {**json.loads(site.lease().encode(TOKEN)), "epoch": new.epoch + 100, "sig": "f" * 64}
    for key in (None, CLOUD_TOKEN):
        assert tunnel_attempt(cloud, new.node, new.epoch + 100, made_up, key=key) == "bad_auth"
    assert cloud.pool()["lease_refused"] == {"lease_forged": 1, "lease_unsigned": 1}
    # Without the token, with a lease naming another epoch, released, or unsigned: refused.
    lease = json.loads(site.lease().encode(TOKEN))
    assert tunnel_attempt(cloud, new.node, new.epoch, lease, token="x" * 24) == "bad_auth"
    assert tunnel_attempt(cloud, new.node, new.epoch + 5, lease) == "bad_auth"
    assert tunnel_attempt(cloud, new.node, new.epoch, {**lease, "ttl_s": 0}) == "bad_auth"
    assert (
        tunnel_attempt(cloud, new.node, new.epoch, {k: v for k, v in lease.items() if k != "sig"})
        == "bad_auth"
    )
    assert tunnel_attempt(cloud, "S009", new.epoch, {**lease, "node": "S009"}) == "stale_epoch"
    # Hostile bytes on the tunnel port and the remote clients' ports: closed, bounded, the cloud carries on.
    junks = (b"\xff" * 9, b"\x00\x00\x00\x00", (1 << 31).to_bytes(4, "big") + b"{", b"GET / HTTP/1.1\r\n\r\n",
             b"\x00\x00\x00\x05[1,2]", b"\x00\x00\x00\x0f" + b'{"type":"send"}')  # fmt: skip
    ports = (cloud.tunnel_port, cloud.relay_port, cloud.relay_port + 1)
    for junk, port in ((j, p) for j in junks for p in ports):
        with socket.create_connection((cloud.ip, port), timeout=5) as s:
            s.recv(65536)
            s.sendall(junk)
            s.settimeout(6)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
    assert cloud.alive()
    status = cloud.status()
    assert status["pools"][KMSN]["tunnel"]["epoch"] == new.epoch  # the real tunnel is untouched
    assert status["refused"].get("stale_epoch", 0) >= 2 and status["refused"].get("bad_auth", 0) >= 6
    assert status["pools"][KMSN]["epoch"] == new.epoch  # the fence never moved for a refused tunnel

    async def still_flows():
        cmd, agent = remote(cloud, "commander", "C03"), local(site, "agent", "S103")
        await cmd.start(timeout=15)
        await agent.start(timeout=15)
        await flows(cmd, agent, 7, 10)
        await cmd.close()
        await agent.close()

    asyncio.run(still_flows())


def tunnel_attempt(cloud, node, epoch, lease, token=CLOUD_TOKEN, key=LEASE_KEY):
    """Dial the cloud's tunnel port as `node` with `epoch` and `lease`, its cloud_sig made with `key`
    (None: presented without one); the refusal code, or 'registered'."""
    extra = {"lease": lease} if key is None else (lambda nonce: {"lease": presented(lease, key, nonce)})
    conn = ClientConnection(role="tunnel", kmsn=KMSN, station=node, token=token, epoch=epoch, raw_mode=True,
                            cnonce=new_nonce(), extra=extra)  # fmt: skip
    with socket.create_connection((cloud.ip, cloud.tunnel_port), timeout=5) as s:
        while True:
            data = s.recv(65536)
            if not data:
                return "closed"
            conn.receive_data(data)
            out = conn.data_to_send()
            if out:
                s.sendall(out)
            for event in conn.events_received():
                if isinstance(event, ErrorReceived):
                    return event.code
                if isinstance(event, Registered):
                    return "registered"
