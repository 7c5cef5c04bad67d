"""Beacons on a real 3-agent site on loopback (docs/design.md §13): a leader whose
whole agent is killed is replaced long before its TTL, a frozen one only on the
serving right's silence (docs/design.md §15, tests/test_agents_serving.py), and a
flood of datagrams changes nothing."""

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from harness import DEFAULT, FAST, KMSN, ROOT, TOKEN, listening, wait_until, write_lease

from elections.core.beacons import Beacon
from relay.client.beacon_discovery import BeaconListener
from relay.client.discovery import Discovery
from relay.client.events import Received
from relay.client.relay_client import RelayClient
from relay.lease_file import lease_file

pytestmark = pytest.mark.agents


def pool_view(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


def hears_everyone(site, agent, others=None) -> bool:
    members = pool_view(agent).get("beacons", {}).get("members", {})
    others = {a.name for a in site.agents if a is not agent} if others is None else others
    return others <= set(members) and all(members[n]["age_s"] < 1.0 for n in others)


def doctor(agent) -> dict[str, tuple[bool, str]]:
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", "doctor", "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    return {c["check"]: (c["ok"], c["detail"]) for c in json.loads(out.stdout)}


def client(site, role, station, beacons_only=False):
    """A relay client finding the leader from the lease, or from the leader's beacons alone (no share)."""
    port = int(site.agents[0].setting("RELAY_PORT")) + 2
    beacons = BeaconListener(TOKEN, KMSN, port)
    where = {"beacons": beacons} if beacons_only else {"lease": lease_file(str(site.lease_dir), TOKEN, KMSN)}
    discovery = Discovery.build(kmsn=KMSN, **where)
    return RelayClient(role=role, kmsn=KMSN, station=station, token=TOKEN, discovery=discovery,
                       keepalive=1.0)  # fmt: skip


def send_beacon(port: int, node: str, epoch: int, key: str = TOKEN, seq: int = 1,
                to: str = "127.255.255.255") -> None:  # fmt: skip
    """A leader beacon of `node`, signed with `key`, sent to `to` (broadcast on loopback) three times."""
    raw = Beacon(KMSN, node, "127.0.0.99", 9530, "leader", epoch, 1, "9" * 16, seq).encode(key)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        for _ in range(3):
            sock.sendto(raw, (to, port))


def flood(ip: str, port: int, seconds: float, per_second: int = 10_000) -> int:
    """Forged beacons at `per_second` for `seconds`, paced in 10 ms batches."""
    doc = {"v": 1, "kmsn": KMSN, "node": "S009", "ip": ip, "port": 9530, "role": "leader", "epoch": 999,
           "renew_seq": 1, "boot": "0" * 16, "seq": 1, "sig": "00" * 32}  # fmt: skip
    junk = json.dumps(doc).encode()
    sent = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds:
            while sent < elapsed * per_second:
                try:
                    sock.sendto(junk, (ip, port))
                except OSError:
                    pass
                sent += 1
            time.sleep(0.01)
    return sent


@pytest.mark.long
def test_a_flood_changes_nothing_and_kill_9_of_the_leaders_agent_moves_clients_within_seconds(site_factory):
    site = site_factory(3, timing=DEFAULT)  # TTL 10: the lease alone would take ~10 s
    site.start()
    first = site.wait_settled(timeout=60)
    leader = site.by_name(first.node)
    beacon_port = int(leader.setting("RELAY_PORT")) + 2
    relay_port = int(leader.setting("RELAY_PORT"))
    assert listening(leader.ip, beacon_port), "the supervisor holds the liveness port"
    wait_until(lambda: all(hears_everyone(site, a) for a in site.agents), 15, "everyone to hear the others")
    # relayclient --discover: the relay from the leader's beacons alone, confirmed by the handshake.
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(site.agents[1].ini)}
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayclient", "ping", "--discover",
                           "--lease-dir", "", "--count", "1", "--json"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f'"epoch": {first.epoch}' in done.stdout + done.stderr, done.stdout + done.stderr

    # 10,000 forged datagrams a second at the leader for 4 s: renewals go on, nothing fails over.
    seqs: list[tuple[float, int]] = []
    sender = threading.Thread(target=lambda: seqs.append((0.0, flood(leader.ip, beacon_port, 4.0))))
    sender.start()
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        rec = site.lease()
        assert rec is not None and (rec.node, rec.epoch) == (first.node, first.epoch), rec
        if not seqs or seqs[-1][1] != rec.renew_seq:
            seqs.append((time.monotonic(), rec.renew_seq))
        time.sleep(0.05)
    sender.join()
    assert seqs[-1][1] >= 3_000, f"only {seqs[-1][1]} datagrams sent"
    renewals = [t for t, _ in seqs[:-1]]
    assert len(renewals) >= 2, seqs  # LEASE_RENEW 3 s: one or two renewals within 4 s
    refused = wait_until(lambda: pool_view(leader).get("refusals", {}).get("counts", {}), 10, "the counts")
    assert refused.get("too_many", 0) + refused.get("forged", 0) >= 3_000, refused

    async def scenario():
        cmd, s101 = client(site, "commander", "C01"), client(site, "agent", "S101", beacons_only=True)
        for c in (cmd, s101):
            await c.start(timeout=15)
        seq = (site.lease() or first).renew_seq
        # Right after a renewal: the worst case for a TTL.
        wait_until(lambda: (site.lease() or first).renew_seq > seq, 10, "a renewal")
        leader.kill9()
        killed = time.monotonic()
        for n in range(1, 6):  # sent during the gap: queued, delivered after it
            await s101.send({"n": n})
        while not all(c.registered and (c.epoch or 0) > first.epoch for c in (cmd, s101)):
            assert time.monotonic() - killed < 3.0, "clients not on the new leader within 3 s of kill -9"
            await asyncio.sleep(0.02)
        gap = time.monotonic() - killed
        got = set()
        while len(got) < 5:
            item = await cmd.receive(timeout=10)
            if isinstance(item, Received):
                got.add(item.data["n"])
        assert got == {1, 2, 3, 4, 5}
        for c in (cmd, s101):
            await c.close()
        return gap

    gap = asyncio.run(scenario())
    new = site.lease()
    assert new is not None and new.epoch == first.epoch + 1 and new.node != first.node
    assert listening(site.by_name(new.node).ip, relay_port)
    winner = site.by_name(new.node)
    wait_until(lambda: ("elected", new.epoch) in [(k, e) for k, e, _ in winner.history()], 5, "the row")
    reasons = [r for k, e, r in winner.history() if (k, e) == ("elected", new.epoch)]
    assert "agent is gone" in reasons[0], reasons
    print(f"clients on the new leader {gap:.2f} s after kill -9")


@pytest.mark.long
def test_unicast_peers_one_way_paths_and_a_frozen_leader_replaced_that_never_serves_again(site_factory):
    site = site_factory(3, timing=FAST)  # TTL 3, renew 1, poll 0.5, deadline 2; beacons every 0.2 s
    # BEACON_PEERS instead of broadcast; S003 forgets S001: a one-way path S001 -> S003.
    peers = {"S001": "127.0.0.22,127.0.0.23", "S002": "127.0.0.21,127.0.0.23", "S003": "127.0.0.22"}
    for agent in site.agents:
        agent.ini.write_text(agent.ini.read_text() + f"BEACON_PEERS = {peers[agent.name]}\n")
    site.start()
    first = site.wait_settled(timeout=60)
    old = site.by_name(first.node)
    hears = {"S001": {"S002"}, "S002": {"S001", "S003"}, "S003": {"S001", "S002"}}
    wait_until(lambda: all(hears_everyone(site, a, hears[a.name]) for a in site.agents), 15, "the beacons")
    s001, s003 = site.by_name("S001"), site.by_name("S003")

    def s001_hears():
        try:
            return json.loads((site.lease_dir / "members" / "S001.json").read_text()).get("hears")
        except (OSError, ValueError):
            return None

    wait_until(lambda: s001_hears() == ["S002"], 15, "S001's heartbeat to say whom it hears")
    checks = doctor(s003)
    assert checks["detection"] == (True, "beacons") and checks["beacons from S002"][0] is True, checks
    assert "one-way: S003 hears S001, S001 does not hear S003" in checks["beacons from S001"][1], checks
    ok, detail = doctor(s001)["beacons from S003"]
    assert not ok and "none heard; one-way: S003 hears S001" in detail, detail
    seq = (site.lease() or first).renew_seq
    wait_until(lambda: (site.lease() or first).renew_seq > seq, 10, "a renewal")
    renewed = time.monotonic()
    old.signal_group(signal.SIGSTOP)  # silence, but its host keeps its sockets: no evidence of death
    new = site.wait_leader(timeout=3 + 2 + 3, other_than=first.node)
    took = time.monotonic() - renewed
    time.sleep(max(0.0, renewed + 2 * 3 - time.monotonic()))
    old.signal_group(signal.SIGCONT)
    wait_until(lambda: old.state().get("leader") is False, 5, "the woken leader to step down")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        rec = site.lease()
        # The woken leader never takes it back. With S001 deaf to S003 (the one-way path), S001
        # may take S003's epoch on silence too: S003 never had S001's acks (docs/design.md §15).
        assert rec is not None and rec.node != old.name and rec.epoch >= new.epoch, rec
        assert (rec.node, rec.epoch) == (new.node, new.epoch) or rec.node == "S001", rec
        time.sleep(0.05)
    winner = site.by_name(new.node)
    reasons = [r for k, e, r in winner.history() if (k, e) == ("elected", new.epoch)]
    # Before the TTL only on the serving right's silence (docs/design.md §15): the majority did not
    # hear a leader that served by acks; never on silence alone.
    assert reasons and ("silent for" in reasons[0] or "expired" in reasons[0]), (took, reasons)
    assert took >= 3 - 0.3 or "silent for" in reasons[0], (took, reasons)
    # Split-brain guard: a forged leader beacon and a second leader of one epoch are security events...
    now = site.lease() or new  # S001 may hold it now (above): the guard is the leader's
    winner, new = site.by_name(now.node), now
    port = int(winner.setting("RELAY_PORT")) + 2
    send_beacon(port, "S009", new.epoch, key="not-the-pool-key-0123", to=winner.ip)
    send_beacon(port, "S009", new.epoch, seq=2, to=winner.ip)

    def security_events():
        c = pool_view(winner).get("refusals", {}).get("counts", {})
        return c if c.get("split_brain") and c.get("forged") else None

    counts = wait_until(security_events, 10, "the security events")
    assert counts["split_brain"] >= 1 and counts["forged"] >= 1, counts
    assert winner.state().get("leader") is True  # the store still names it: it keeps leading
    # ...and a leader beacon of a higher epoch that the store confirms makes the leader step down at once.
    write_lease(site.lease_dir, "S009", "127.0.0.99", 9530, new.epoch + 1)
    send_beacon(port, "S009", new.epoch + 1, seq=3, to=winner.ip)
    sent = time.monotonic()
    wait_until(lambda: winner.state().get("leader") is False, 3, "the leader to step down")
    took = time.monotonic() - sent
    # Why it stepped down: the beacon's reaction, or (when its own renewal read the store between
    # the lease's write and the beacon's arrival, a race of milliseconds) the lease itself.
    log = winner.log()
    assert "beacons as leader of epoch" in log or "the lease names S009" in log, log[-2000:]
    print(f"stepped down {took:.2f} s after a higher epoch's beacon")


@pytest.mark.long
def test_a_quiet_pool_still_judges_every_live_member_fresh(site_factory):
    # Beacons vouching for the lease make followers read the members' files less
    # often; a live member must never look older than HEARTBEAT_TTL for it (TTL 3,
    # renew 1: it did, at ~5 s, when the files were read every 5 s).
    site = site_factory(3)
    site.start()
    site.wait_settled(timeout=60)
    wait_until(lambda: all(hears_everyone(site, a) for a in site.agents), 15, "everyone to hear the others")
    names = {a.name for a in site.agents}
    deadline, looks = time.monotonic() + 8.0, 0
    while time.monotonic() < deadline:  # an invariant over a window longer than the old 5 s
        for agent in site.agents:
            members = pool_view(agent).get("members") or {}
            if set(members) != names:
                continue  # a view being replaced
            looks += 1
            stale = {n: m.get("age") for n, m in members.items() if not (m.get("age") or 0) < 3.0}
            assert not stale, f"{agent.name} judged live members stale: {stale}"
            assert all(m.get("eligible") for m in members.values()), (agent.name, members)
        time.sleep(0.2)
    assert looks > 60


@pytest.mark.long
def test_a_squatter_on_the_liveness_port_turns_that_agents_beacons_off_and_fakes_no_death(site_factory):
    site = site_factory(2, timing=DEFAULT)
    squatted, other = site.agents
    port = int(squatted.setting("RELAY_PORT")) + 2
    # Another process takes NODE_IP:BEACON_PORT first, and ends every connection at
    # once: to a follower watching it, "the leader's host says its agent is gone".
    squatter = socket.create_server((squatted.ip, port))
    squatter.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                squatter.accept()[0].close()
            except TimeoutError:
                pass

    server = threading.Thread(target=serve)
    server.start()
    try:
        squatted.start()
        first = site.wait_leader(60)
        assert first.node == squatted.name
        other.start()
        wait_until(lambda: bool(pool_view(other)), 60, "S002 to run")
        said = wait_until(lambda: "beacons are off on this agent" in squatted.log() and squatted.log(), 10)
        assert "stkrelay.E031" in said and squatted.alive()
        # The squatter's endings are no evidence without the leader's beacons: nothing moves.
        end = time.monotonic() + 8
        while time.monotonic() < end:
            rec = site.lease()
            assert rec is not None and (rec.node, rec.epoch) == (first.node, first.epoch), rec
            time.sleep(0.2)
        seq = site.lease().renew_seq
        wait_until(lambda: site.lease().renew_seq > seq, 10, "a renewal")
        squatted.kill9()  # its agent really is gone now: the lease TTL tells, as before beacons
        killed = time.monotonic()
        new = site.wait_leader(40, other_than=squatted.name)
        took = time.monotonic() - killed
        assert new.epoch == first.epoch + 1 and took > 5.0, f"taken over {took:.1f} s after kill -9"
        wait_until(lambda: ("elected", new.epoch) in [(k, e) for k, e, _ in other.history()], 10, "the row")
        reasons = [r for k, e, r in other.history() if (k, e) == ("elected", new.epoch)]
        assert "agent is gone" not in reasons[0], reasons
        assert "agent is gone" not in other.log() and "Traceback" not in site.logs()
    finally:
        stop.set()
        server.join()
        squatter.close()
