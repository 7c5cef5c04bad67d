"""Someone on the site's LAN who can write the share but has no key (DESIGN.md
§5.4), against real agents: every file kind poisoned while the leader lives,
forged commands, old leases swapped back and forth after a crash, a lock kept
"fresh" by rewriting it. The live leader keeps its epoch, a crashed leader is
still replaced, no agent exits, forged commands change nothing, and every
refusal is visible (pool view, /metrics)."""

import json
import threading
import time

import pytest
from harness import live_lease, signed_lock, wait_until

from elections.core.lease import sign

pytestmark = pytest.mark.agents


def pool(agent):
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


def refused(agent, source, cause):
    recent = (pool(agent).get("refusals") or {}).get("recent") or []
    return any(r["source"] == source and r["cause"] == cause for r in recent)


def settled(site):
    lease = site.wait_settled()
    wait_until(lambda: all(len(pool(a).get("members") or {}) == 3 for a in site.agents), 30, "pool views")
    return lease


def test_poison_in_every_file_kind_changes_nothing_and_is_shown(site_factory):
    site = site_factory(3)  # TTL 3, renew 1, poll 0.5
    site.start()
    lease = settled(site)
    follower = next(a for a in site.agents if a.name != lease.node)
    share = site.lease_dir
    nested = b"[" * 10_000
    (share / "members" / "S009.json").write_bytes(nested)  # a member's heartbeat (none rewrites it)
    with open(share / "events" / f"{follower.name}.jsonl", "ab") as fh:  # one event line
        fh.write(nested + b"\n")
    (share / "events" / "S999.jsonl").write_bytes(b"x" * (300 << 10))  # a huge line, no newline
    (share / "relay_leader.json").write_bytes(nested)  # the lease itself
    # The leader reads the poisoned lease before it rewrites it (a follower may
    # look only afterwards); the event line and the member file stay for all.
    leader = site.by_name(lease.node)
    wait_until(lambda: refused(leader, "relay_leader.json", "too_deep"), 10, "the leader refusing the lease")
    for agent in site.agents:
        wait_until(lambda a=agent: refused(a, f"events/{follower.name}.jsonl", "too_deep"), 10, "events")
    for agent in site.agents:
        wait_until(lambda a=agent: refused(a, "members/S009.json", "too_deep"), 10, f"{agent.name}: member")
    back = wait_until(lambda: live_lease(share), 5, "the leader to rewrite its lease")
    assert (back.node, back.epoch) == (lease.node, lease.epoch)
    # The pool goes on: the tail moved past the poisoned line, the poisoned
    # member is no member, and a crash is still taken over.
    leader.kill9()
    new = site.wait_leader(timeout=15, other_than=lease.node)
    assert new.epoch == lease.epoch + 1
    assert all(a.alive() for a in site.agents if a is not leader)
    logs = "".join(a.log() for a in site.agents)
    assert "Traceback" not in logs and "RecursionError" not in logs
    with follower.urlopen("/metrics") as resp:
        text = resp.read().decode()
    counted = [
        ln
        for ln in text.splitlines()
        if ln.startswith("stkrelay_security_events_total{") and 'cause="too_deep"' in ln
    ]
    assert counted and float(counted[0].rsplit(" ", 1)[1]) >= 2


def test_forged_commands_in_the_event_files_are_refused_and_change_nothing(site_factory):
    site = site_factory(3)
    site.start()
    lease = settled(site)
    other = next(a for a in site.agents if a.name != lease.node)
    events = site.lease_dir / "events"
    drain = {"node": other.name, "seq": 10**9, "kind": "drain_requested", "epoch": lease.epoch,
             "target": lease.node, "actor": "mallory", "reason": "forged"}  # fmt: skip
    pause = dict(drain, kind="pause_requested", seq=10**9 + 1)
    lines = [
        json.dumps(drain),  # unsigned, in the name of a member, in its own file
        json.dumps(dict(pause, sig=sign(pause, "guessed-key-0123456789"))),  # wrongly signed
    ]
    with open(events / f"{other.name}.jsonl", "a") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(events / "S404.jsonl", "w") as fh:  # a file of its own, naming another node
        fh.write(json.dumps(dict(drain, node=other.name)) + "\n")
    for agent in site.agents:
        wait_until(lambda a=agent: refused(a, f"events/{other.name}.jsonl", "unsigned"), 10, "unsigned")
        wait_until(lambda a=agent: refused(a, f"events/{other.name}.jsonl", "forged"), 10, "forged")
        wait_until(lambda a=agent: refused(a, "events/S404.jsonl", "unsigned"), 10, "another node's line")
    # Every agent has read past the forged lines: had they been obeyed, the
    # leader would be drained and handing off, and the pool paused.
    for agent in site.agents:
        view = pool(agent)
        assert not view["members"][lease.node]["drain"] and view["paused"] is False, view
    now = live_lease(site.lease_dir)
    assert (now.node, now.epoch) == (lease.node, lease.epoch)
    assert not any(h[0] == "drain_requested" for a in site.agents for h in a.history())


def test_old_leases_swapped_back_and_forth_do_not_keep_a_crashed_leader_alive(site_factory):
    # The lease alone: with beacons the followers see the crash at once (the liveness
    # port refuses) and take over before any swapped copy is read.
    site = site_factory(3, extra={"BEACON_INTERVAL": "0"})
    site.start()
    lease = settled(site)
    path = site.lease_dir / "relay_leader.json"
    first = path.read_bytes()
    wait_until(lambda: path.read_bytes() != first, 5, "a renewal")
    copies = [first, path.read_bytes()]
    site.by_name(lease.node).kill9()
    killed = time.monotonic()
    stop = threading.Event()

    def swap():  # faster than the followers poll, for as long as the test runs
        i = 0
        while not stop.is_set():
            tmp = path.with_name(".swap.tmp")
            tmp.write_bytes(copies[i % 2])
            tmp.replace(path)
            i += 1
            stop.wait(0.2)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        new = site.wait_leader(timeout=20, other_than=lease.node)
    finally:
        stop.set()
        swapper.join(2)
    took = time.monotonic() - killed
    assert new.epoch > lease.epoch and took < 3 + 3, f"took {took:.1f} s"
    logs = "".join(a.log() for a in site.agents if a.name != lease.node)
    assert "SECURITY: ignoring replayed lease" in logs


def test_a_lock_rewritten_every_half_second_does_not_stop_an_election(site_factory):
    site = site_factory(3)
    site.start()
    lease = settled(site)
    lock = site.lease_dir / "relay_leader.lock"
    stop = threading.Event()
    old_valid = [signed_lock(lease.node, 1, f"old{i}") for i in range(2)]

    def squat():
        i = 0
        while not stop.is_set():
            content = old_valid[i % 2] if i % 3 else json.dumps({"node": "S009", "pid": 1, "nonce": str(i)})
            tmp = lock.with_name(".squat.tmp")
            tmp.write_text(content)
            tmp.replace(lock)
            i += 1
            stop.wait(0.5)

    squatter = threading.Thread(target=squat, daemon=True)
    squatter.start()
    try:
        site.by_name(lease.node).kill9()
        killed = time.monotonic()
        new = site.wait_leader(timeout=20, other_than=lease.node)
        took = time.monotonic() - killed
    finally:
        stop.set()
        squatter.join(2)
    # TTL, plus the 2 s a signed lock may be held, plus polls and backoff.
    assert new.epoch > lease.epoch and took < 3 + 2 + 3, f"took {took:.1f} s"
