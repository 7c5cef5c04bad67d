"""Someone on the site's LAN who can write the share but has no key (docs/design.md
§5.4), against real agents: every file kind poisoned while the leader lives,
forged commands, old leases swapped back and forth after a crash, a lock kept
"fresh" by rewriting it. The live leader keeps its epoch, a crashed leader is
still replaced, no agent exits, forged commands change nothing, and every
refusal is visible (pool view, /metrics)."""

import json
import os
import threading
import time

import pytest
from harness import DEFAULT, FAST, live_lease, signed_lock, wait_until

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


@pytest.mark.long
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


def swapping(path, copies, every):
    """Put `copies` in place of the lease in turn, every `every` s, until the returned event is set."""
    stop = threading.Event()

    def swap():
        i = 0
        while not stop.is_set():
            tmp = path.with_name(f".{path.name}.swap.tmp")
            tmp.write_bytes(copies[i % len(copies)])
            tmp.replace(path)
            i += 1
            stop.wait(every)

    threading.Thread(target=swap, daemon=True).start()
    return stop


def old_copies(path):
    """Two validly signed copies of the live lease, the second a renewal newer than the first."""
    first = path.read_bytes()
    wait_until(lambda: path.read_bytes() != first, 15, "a renewal")
    return [first, path.read_bytes()]


@pytest.mark.long
def test_old_leases_swapped_back_and_forth_do_not_keep_a_crashed_leader_alive(site_factory):
    # The lease alone: with beacons the followers see the crash at once (the liveness
    # port refuses) and take over before any swapped copy is read.
    site = site_factory(3, extra={"BEACON_INTERVAL": "0"})
    site.start()
    lease = settled(site)
    path = site.lease_dir / "relay_leader.json"
    copies = old_copies(path)
    site.by_name(lease.node).kill9()
    killed = time.monotonic()
    stop = swapping(path, copies, 0.2)  # faster than the followers poll
    try:
        new = site.wait_leader(timeout=20, other_than=lease.node)
    finally:
        stop.set()
    took = time.monotonic() - killed
    assert new.epoch > lease.epoch and took < 3 + 3, f"took {took:.1f} s"
    logs = "".join(a.log() for a in site.agents if a.name != lease.node)
    assert "SECURITY: ignoring replayed lease" in logs


@pytest.mark.long
def test_old_leases_swapped_in_every_second_do_not_slow_the_beacons_fast_path(site_factory):
    """Issue 28: after kill -9, two old signed copies of the dead leader's lease
    swapped in every second made the pool wait out the TTL instead of the
    beacon evidence's ~0.7 s. A replay is no evidence of life: the evidence
    about the holder last seen decides. Default timing (TTL 10), beacons on."""
    site = site_factory(3, timing=DEFAULT)
    site.start()
    lease = settled(site)
    path = site.lease_dir / "relay_leader.json"
    copies = old_copies(path)
    wait_until(lambda: path.read_bytes() not in copies, 15, "a renewal past both copies")
    stop = swapping(path, copies, 1.0)
    try:
        wait_until(lambda: path.read_bytes() in copies, 5, "a replayed copy in place")
        site.by_name(lease.node).kill9()
        killed = time.monotonic()
        new = site.wait_leader(timeout=20, other_than=lease.node)
        took = time.monotonic() - killed
    finally:
        stop.set()
    # Must hold: the fast path's time (<= 1 s); 3 s of CI headroom is still far from the TTL of 10 s.
    assert new.epoch > lease.epoch and took < 3, f"took {took:.1f} s"


@pytest.mark.parametrize("timing", ["fast", "default"])
@pytest.mark.long
def test_a_lock_rewritten_with_junk_every_fifth_of_a_second_does_not_stop_an_election(site_factory, timing):
    """Issue 27: a lock rewritten with a line of junk every 0.4 s used to keep the
    pool leaderless for as long as the rewriting went on (it aged like a lock a
    writer was still filling). Locks are published whole now, so junk is broken
    at once. The lease alone (no beacons): the takeover waits the TTL, no more."""
    ttl = 3 if timing == "fast" else 10
    site = site_factory(3, timing=FAST if timing == "fast" else DEFAULT, extra={"BEACON_INTERVAL": "0"})
    site.start()
    lease = settled(site)
    lock = site.lease_dir / "relay_leader.lock"
    stop = threading.Event()

    def squat():
        i = 0
        while not stop.is_set():
            tmp = lock.with_name(".squat.tmp")
            tmp.write_bytes(b"junk %d\n" % i if i % 2 else b"")
            tmp.replace(lock)
            i += 1
            stop.wait(0.2)

    squatter = threading.Thread(target=squat, daemon=True)
    squatter.start()
    try:
        site.by_name(lease.node).kill9()
        killed = time.monotonic()
        new = site.wait_leader(timeout=ttl + 20, other_than=lease.node)
        took = time.monotonic() - killed
    finally:
        stop.set()
        squatter.join(2)
    print(f"junk lock, {timing} timing (TTL {ttl}): kill -9 -> new leader in {took:.2f} s")
    # Must hold: TTL + 2 s; one more second of headroom for a loaded CI runner.
    assert new.epoch > lease.epoch and took < ttl + 3, f"took {took:.1f} s"
    try:
        wait_until(lambda: any(refused(a, "relay_leader.lock", "not_json") for a in site.agents), 10, "junk")
    except AssertionError:
        raise AssertionError([(pool(a).get("refusals") or {}).get("recent") for a in site.agents]) from None


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


@pytest.mark.chaos
@pytest.mark.timeout(900)
def test_failover_after_failover_under_a_junk_lock_and_replayed_leases(site_factory):
    """The long run of the pack (`make chaos`): ten kill -9s of whoever leads, each
    while the lock is rewritten with junk every 0.2 s and two old signed copies of
    the lease are swapped in every 0.5 s. Every failover within TTL + 2 s (+1 of
    headroom), epochs only grow, the killed agent comes back, nobody else exits."""
    rounds = int(os.environ.get("STK_CHAOS_ROUNDS", "10"))
    site = site_factory(3, extra={"BEACON_INTERVAL": "0"})  # the lease alone: the TTL path
    site.start()
    lease = settled(site)
    lock, path = site.lease_dir / "relay_leader.lock", site.lease_dir / "relay_leader.json"
    took_all = []
    for _ in range(rounds):
        copies = old_copies(path)
        junk = swapping(lock, [b"junk\n", b""], 0.2)
        replays = swapping(path, copies, 0.5)
        try:
            victim = site.by_name(lease.node)
            victim.kill9()
            killed = time.monotonic()
            new = site.wait_leader(timeout=30, other_than=lease.node, min_epoch=lease.epoch + 1)
            took_all.append(time.monotonic() - killed)
        finally:
            junk.set()
            replays.set()
        assert new.epoch > lease.epoch and took_all[-1] < 3 + 3, took_all
        victim.start()
        lease = settled(site)
    assert all(a.alive() for a in site.agents)
    print(f"{rounds} failovers under junk lock + replays: max {max(took_all):.2f} s, "
          f"p50 {sorted(took_all)[len(took_all) // 2]:.2f} s")  # fmt: skip
