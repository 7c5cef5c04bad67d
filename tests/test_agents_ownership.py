# ruff: noqa: F811 (the fixtures of test_executor_aws, imported)
"""Where the VIP really is, with real agents in network namespaces (tests/netns.py):
the VIP moved by hand to a follower is `drift` in one `relayctl doctor` run and
is put right by the leader within 5 s (the follower letting go once the leader
holds it again), each step a repair in the pool's history; with failover
paused it stays drift (and a conflict while on both) until resumed; a host that
is no member holding it too is a conflict no agent acts on."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest
from harness import ROOT, wait_until
from test_executor_aws import aws_env, moto, vpc  # noqa: F401 (fixtures)

pytestmark = pytest.mark.agents

VIP = "10.77.0.100"
EXTRA = {"VIP_ADDRESS": f"{VIP}/24", "VIP_INTERFACE": "eth0", "VIP_GARP": "builtin", "OWNERSHIP_CHECK": "1"}


def has_vip(host) -> bool:
    out = host.run("ip", "-j", "addr", "show", "dev", "eth0").stdout
    return any(a.get("local") == VIP for link in json.loads(out) for a in link.get("addr_info", []))


def by_hand(host, on: bool) -> None:
    host.run("ip", "addr", "add" if on else "del", f"{VIP}/24", "dev", "eth0")


def manage(site, agent, *args: str) -> subprocess.CompletedProcess[str]:
    """`manage.py relayctl ...` in the agent's own namespace (its `ip addr`, its ARP)."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "STK_INI": str(agent.ini)}
    argv = [*site.host(agent).wrapper, sys.executable, str(ROOT / "manage.py"), "relayctl", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=ROOT, env=env)


def doctor_address(site, agent) -> dict:
    out = manage(site, agent, "doctor", "--json")
    [check] = [c for c in json.loads(out.stdout) if c["check"] == f"address {VIP} (vip)"]
    return check


def looks(agent) -> float | None:
    """When the agent's watch last looked (its pool.json, this machine's monotonic clock)."""
    try:
        return json.loads((agent.data_dir / "pool.json").read_text()).get("ownership", {}).get("at")
    except (OSError, ValueError):
        return None


def verdict(agent, address: str = VIP) -> str | None:
    try:
        entries = json.loads((agent.data_dir / "pool.json").read_text())["ownership"]["entries"]
    except (OSError, ValueError, KeyError):
        return None
    return next((e["verdict"] for e in entries if e["address"] == address), None)


def repairs(agent) -> list[tuple[str, int, str, str]]:
    """(kind, epoch, verb, repair) of the repairs in the agent's history (every agent's, projected)."""
    db = sqlite3.connect(f"file:{agent.data_dir / 'stkrelay.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute("SELECT node, kind, epoch, detail FROM elections_electionevent "
                          "WHERE kind LIKE 'action_%' ORDER BY id").fetchall()  # fmt: skip
    finally:
        db.close()
    out = []
    for node, kind, epoch, detail in rows:
        d = json.loads(detail)
        if d.get("repair"):
            out.append((node, kind, epoch, d.get("verb"), d["repair"]))
    return out


def settled(site):
    site.start()
    lease = site.wait_settled(timeout=60)
    leader = site.by_name(lease.node)
    follower = next(a for a in site.agents if a is not leader)
    wait_until(lambda: has_vip(site.host(leader)), 15, "the leader's VIP")
    wait_until(lambda: verdict(leader) == "ok" and verdict(follower) == "ok", 20, "an ok map on both agents")
    return lease, leader, follower


@pytest.mark.long
def test_a_vip_moved_by_hand_to_a_follower_is_drift_and_the_leader_puts_it_right_within_5_s(netns_site):
    site = netns_site(2, extra=EXTRA)
    lease, leader, follower = settled(site)
    lh, fh = site.host(leader), site.host(follower)

    by_hand(lh, False)
    by_hand(fh, True)
    moved = time.monotonic()
    wait_until(lambda: has_vip(lh) and not has_vip(fh), 10, "the VIP back on the leader alone")
    took = time.monotonic() - moved
    print(f"\nVIP moved by hand to {follower.name}: back on {leader.name} alone after {took:.2f} s")
    assert took < 5.0
    wait_until(lambda: verdict(leader) == "ok", 10, "an ok map again")
    assert doctor_address(site, leader)["verdict"] == "ok"
    # The two `ip` commands of the move are two moments: a look between them saw the VIP nowhere.
    took_back = {
        (leader.name, "action_applied", lease.epoch, "assign_vip", cause) for cause in ("drift", "missing")
    }
    let_go = (follower.name, "action_applied", lease.epoch, "release_vip", "conflict")
    wait_until(lambda: let_go in repairs(leader) and took_back & set(repairs(leader)), 15,
               "both repairs in the pool's history")  # fmt: skip
    assert len(repairs(leader)) == 2  # one action each
    assert site.lease().epoch == lease.epoch  # put right without an election

    # A host that is no member (the LAN's observer) holding the VIP too: a conflict nobody can act on.
    by_hand(site.observer, True)
    check = doctor_address(site, leader)
    assert (check["verdict"], check["holders"], check["ok"]) == ("conflict", [leader.name], False)
    assert len(check["foreign"]) == 1
    wait_until(lambda: verdict(leader) == "conflict", 10, "the watch's conflict")
    before, seen = repairs(leader), looks(leader)
    wait_until(lambda: (looks(leader) or 0) >= (seen or 0) + 3, 15, "three more looks")
    assert repairs(leader) == before and has_vip(lh) and has_vip(site.observer)
    by_hand(site.observer, False)


@pytest.mark.long
def test_with_failover_paused_a_drift_and_a_conflict_stay_until_resumed(netns_site):
    site = netns_site(2, extra=EXTRA)
    lease, leader, follower = settled(site)
    lh, fh = site.host(leader), site.host(follower)
    assert manage(site, leader, "pause").returncode == 0
    wait_until(lambda: json.loads((leader.data_dir / "pool.json").read_text()).get("paused") is True, 15,
               "the pause to reach the leader")  # fmt: skip

    by_hand(lh, False)
    by_hand(fh, True)
    check = doctor_address(site, leader)  # one run: its own look, the follower's MAC answering ARP
    assert (check["verdict"], check["holders"], check["expected"]) == ("drift", [follower.name], leader.name)
    assert f"expected on {leader.name} (epoch {lease.epoch}), on {follower.name}" in check["detail"]
    assert doctor_address(site, follower)["verdict"] == "drift"  # the same from the follower's side
    by_hand(lh, True)
    assert doctor_address(site, leader)["holders"] == sorted([leader.name, follower.name])
    assert doctor_address(site, leader)["verdict"] == "conflict"
    by_hand(lh, False)

    wait_until(lambda: verdict(leader) == "drift", 10, "the leader's watch to see the drift")
    seen = looks(leader)
    wait_until(lambda: (looks(leader) or 0) >= (seen or 0) + 3, 15, "three more looks while paused")
    assert not has_vip(lh) and has_vip(fh) and repairs(leader) == []

    assert manage(site, leader, "resume").returncode == 0
    resumed = time.monotonic()
    wait_until(lambda: has_vip(lh) and not has_vip(fh), 10, "the VIP put right after the resume")
    print(f"\nput right {time.monotonic() - resumed:.2f} s after the resume")
    assert time.monotonic() - resumed < 5.0 + 3.0  # the resume event reaches the leader first


@pytest.mark.long
def test_real_agents_on_aws_put_a_secondary_ip_moved_by_hand_in_moto_right(site_factory, moto, aws_env, vpc):
    """Two agents on loopback, each with its own ENI in the moto server: the address moved by hand
    from the leader's ENI to the follower's is drift in one doctor run (failover paused), and put
    right once resumed (moto copies where EC2 moves: the follower then lets its copy go)."""
    import os

    from test_executor_aws import REGION, SEIZED, secondary_ips

    ec2, eni_a, eni_b = vpc
    site = site_factory(2, extra={"AWS_PRIVATE_IP": SEIZED, "AWS_REGION": REGION, "AWS_ENDPOINT_URL": moto,
                                  "OWNERSHIP_CHECK": "1"})  # fmt: skip
    enis = {}
    for agent, eni in zip(site.agents, (eni_a, eni_b), strict=True):
        agent.ini.write_text(agent.ini.read_text() + f"AWS_ENI_ID = {eni}\n")
        agent.env.update({k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                     "AWS_SHARED_CREDENTIALS_FILE")})  # fmt: skip
        enis[agent.name] = eni
    site.start()
    lease = site.wait_settled(timeout=60)
    leader = site.by_name(lease.node)
    follower = next(a for a in site.agents if a is not leader)

    def on(agent) -> bool:
        return SEIZED in secondary_ips(ec2, enis[agent.name])

    ok = lambda agent: verdict(agent, SEIZED) == "ok"  # noqa: E731
    try:
        wait_until(lambda: on(leader) and ok(leader) and ok(follower), 30, "ok maps")
    except AssertionError as exc:
        state = (on(leader), on(follower), verdict(leader, SEIZED), verdict(follower, SEIZED))
        raise AssertionError(
            f"{exc}: (on {leader.name}, on {follower.name}, their verdicts) = {state}"
        ) from None
    assert not on(follower)
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(leader.ini), **leader.env}

    def relayctl(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, str(ROOT / "manage.py"), "relayctl", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=ROOT, env=env)

    assert relayctl("pause").returncode == 0
    wait_until(lambda: json.loads((leader.data_dir / "pool.json").read_text()).get("paused") is True, 15,
               "the pause to reach the leader")  # fmt: skip
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=enis[leader.name], PrivateIpAddresses=[SEIZED])
    ec2.assign_private_ip_addresses(NetworkInterfaceId=enis[follower.name], PrivateIpAddresses=[SEIZED])
    [check] = [
        c for c in json.loads(relayctl("doctor", "--json").stdout) if c["check"] == f"address {SEIZED} (aws)"
    ]
    assert (check["verdict"], check["holders"], check["expected"]) == ("drift", [follower.name], leader.name)

    assert relayctl("resume").returncode == 0
    resumed = time.monotonic()
    wait_until(lambda: on(leader) and not on(follower), 15, "the address back on the leader's ENI alone")
    print(f"\nsecondary IP put right {time.monotonic() - resumed:.2f} s after the resume")
    wanted = {(leader.name, "action_applied", lease.epoch, "assign_secondary_ip", "drift"),
              (follower.name, "action_applied", lease.epoch, "release_secondary_ip", "conflict")}  # fmt: skip
    wait_until(lambda: wanted <= set(repairs(leader)), 15, "both repairs in the pool's history")
