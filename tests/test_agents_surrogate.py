"""A lone surrogate against a real 3-agent site (issue 40, finding 1): a share writer without the
key puts a JSON escape `\\ud800` into every kind of record, once and then every 0.2 s. It
parsed, and the signature check's encode raised in every reader: one poisoned lease file left
the pool with no leader for good, every renew, poll and glance task dying with a traceback.
Now each is "no evidence" with the cause `unencodable`, counted on /metrics and shown in the
pool view; the pool keeps its leader, a kill -9 is still taken over within TTL + 2 s, and no
agent logs a traceback. A keyless LAN host's 1,000 such beacons cost a handful of log lines."""

import json
import socket
import threading
import time

import pytest
from harness import KMSN, live_lease, wait_until

from elections.core.beacons import Beacon

pytestmark = pytest.mark.agents
LONE = "\ud800"
TTL = 3.0  # the site's FAST timing


def pool(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


def shown(agent, source: str) -> bool:
    recent = (pool(agent).get("refusals") or {}).get("recent") or []
    return any(r["source"] == source and r["cause"] == "unencodable" for r in recent)


def counted(agent) -> float:
    with agent.urlopen("/metrics") as resp:
        text = resp.read().decode()
    return sum(
        float(ln.rsplit(" ", 1)[1])
        for ln in text.splitlines()
        if ln.startswith("stkrelay_security_events_total{") and 'cause="unencodable"' in ln
    )


def poison(doc: dict) -> bytes:
    """`doc` with a lone surrogate in its node's text and a signature no key made."""
    return json.dumps({**doc, "node": f"{doc.get('node', 'S009')}{LONE}", "sig": "00" * 32}).encode()


class Poisoner(threading.Thread):
    """Writes a poisoned copy of every record kind into the share every `every` seconds."""

    def __init__(self, share, lease_doc: dict, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.share, self.lease_doc, self.every = share, lease_doc, every
        self.stopping = threading.Event()
        self.rounds = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            self.write_all()
            self.rounds += 1
            self.stopping.wait(self.every)

    def write_all(self) -> None:
        share = self.share
        (share / "relay_leader.json").write_bytes(poison(self.lease_doc))
        (share / "members" / "S009.json").write_bytes(poison({"node": "S009", "seq": 1, "epoch": 99}))
        (share / "events" / "S009.jsonl").write_bytes(
            poison({"node": "S009", "seq": 1, "kind": "promote_requested", "target": "S009"}) + b"\n"
        )
        (share / "relay_leader.lock").write_bytes(poison({"node": "S009", "pid": 1, "nonce": "x"}))


def test_a_lone_surrogate_in_every_record_kind_changes_nothing_is_counted_and_a_crash_is_taken_over(
    site_factory,
):
    site = site_factory(3)  # TTL 3, renew 1, poll 0.5
    site.start()
    first = site.wait_settled()
    leader = site.by_name(first.node)
    share = site.lease_dir
    doc = json.loads((share / "relay_leader.json").read_bytes())
    writer = Poisoner(share, {k: v for k, v in doc.items() if k != "sig"})
    writer.write_all()  # once ...
    for agent in site.agents:
        wait_until(lambda a=agent: shown(a, "members/S009.json"), 10, f"{agent.name} showing the member")
    wait_until(lambda: shown(leader, "relay_leader.json"), 10, "the leader showing the lease refused")
    back = wait_until(lambda: live_lease(share), TTL + 2, "the leader to rewrite its lease")
    assert (back.node, back.epoch) == (first.node, first.epoch)
    writer.start()  # ... then every 0.2 s
    try:
        wait_until(lambda: writer.rounds >= 15, 10, "three seconds of poison")
        assert all(a.alive() for a in site.agents)
        held = wait_until(lambda: live_lease(share), TTL + 2, "the live leader's lease between the poison")
        assert (held.node, held.epoch) == (first.node, first.epoch)
        leader.kill9()
        new = site.wait_leader(timeout=TTL + 2, other_than=first.node)
        assert new.epoch > first.epoch
    finally:
        writer.stopping.set()
        writer.join()
    follower = next(a for a in site.agents if a.alive() and a.name != new.node)
    assert counted(follower) >= 1 and counted(site.by_name(new.node)) >= 1
    logs = "".join(a.log() for a in site.agents)
    assert "Traceback" not in logs and "UnicodeEncodeError" not in logs


def test_a_thousand_keyless_beacons_with_a_lone_surrogate_cost_a_few_log_lines(site_factory):
    site = site_factory(3)
    site.start()
    first = site.wait_settled()
    follower = next(a for a in site.agents if a.name != first.node)
    port = int(follower.setting("RELAY_PORT")) + 2
    before = [len(a.log().splitlines()) for a in site.agents]
    doc = Beacon(KMSN, "S009", "127.0.0.99", 9530, "leader", 99, 1, "9" * 16, 1).to_doc()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for i in range(1_000):
            raw = json.dumps({**doc, "node": f"S{i}{LONE}", "seq": i + 1, "sig": "00" * 32}).encode()
            sock.sendto(raw, (follower.ip, port))
            if i % 10 == 9:
                time.sleep(0.01)  # paced so that the kernel's receive buffer drops none

    def refused() -> dict:
        return (pool(follower).get("refusals") or {}).get("counts", {})

    # Every datagram is accounted for: refused as unencodable, or as too many from one address.
    wait_until(lambda: refused().get("unencodable", 0) + refused().get("too_many", 0) >= 1_000, 15,
               "the follower counting all 1,000 refusals")  # fmt: skip
    assert refused().get("unencodable", 0) >= 1
    grown = sum(len(a.log().splitlines()) - n for a, n in zip(site.agents, before, strict=True))
    logs = "".join(a.log() for a in site.agents)
    assert "Traceback" not in logs and "UnicodeEncodeError" not in logs
    assert grown <= 10, f"{grown} log lines for 1,000 keyless beacons"
    assert site.lease().epoch == first.epoch
