"""Randomized failure runs on a real 3-agent site (make chaos).

Invariants checked throughout: the lease's epoch never decreases; no epoch is
ever claimed by two nodes (pool event logs); at no sampled instant do two
agents both claim to lead within their deadlines; the pool always recovers.
"""

import json
import os
import random
import signal
import time

import pytest
from harness import wait_until

from elections.ports.eventlog import read_events
from elections.ports.localstate import Leadership

pytestmark = [pytest.mark.chaos, pytest.mark.agents]


def _check_invariants(site, seen_epochs):
    rec = site.lease()
    if rec is not None:
        assert not seen_epochs or rec.epoch >= seen_epochs[-1], (seen_epochs[-1], rec)
        seen_epochs.append(rec.epoch)
    now = time.monotonic()
    states = {a.name: a.state() for a in site.agents}
    leaders = [name for name, st in states.items() if Leadership.from_doc(st).leads_now(now)]
    detail = {n: (st.get("epoch"), round((st.get("valid_until") or now) - now, 2), st.get("decision"))
              for n, st in states.items()}  # fmt: skip
    assert len(leaders) <= 1, f"two agents lead at once: {leaders} {detail} lease={rec}"


def test_random_kills_freezes_and_restarts_keep_one_leader_and_unique_epochs(site_factory):
    seed = int(os.environ.get("CHAOS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"CHAOS_SEED={seed}")
    site = site_factory(3)
    site.start()
    site.wait_leader(timeout=40)
    seen: list[int] = []
    end = time.monotonic() + float(os.environ.get("CHAOS_SECONDS", "150"))
    while time.monotonic() < end:
        victim = rng.choice(site.agents)
        action = rng.choice(["kill", "freeze", "term", "corrupt", "nothing"])
        if action == "kill" and victim.alive():
            victim.kill9()
        elif action == "freeze" and victim.alive():
            victim.signal_group(signal.SIGSTOP)
        elif action == "term" and victim.alive():
            victim.terminate()
        elif action == "corrupt":
            (site.lease_dir / "relay_leader.json").write_bytes(b'{"torn": ')
        pause = time.monotonic() + rng.uniform(0.5, 5)
        while time.monotonic() < pause:
            _check_invariants(site, seen)
            time.sleep(0.05)
        if action == "freeze":
            victim.signal_group(signal.SIGCONT)
        for a in site.agents:
            if not a.alive():
                a.start()
    # Recovery: a leader, and every agent agrees.
    rec = site.wait_leader(timeout=40)
    wait_until(lambda: [a.name for a in site.agents if a.state().get("leader")] == [site.lease().node], 30,
               "exactly one agent to lead")  # fmt: skip
    claims: dict[int, set[str]] = {}
    for path in (site.lease_dir / "events").glob("*.jsonl"):
        for e in read_events(path):
            if e.get("kind") == "elected":
                claims.setdefault(e["epoch"], set()).add(e["node"])
    assert all(len(nodes) == 1 for nodes in claims.values()), json.dumps(
        {k: sorted(v) for k, v in claims.items() if len(v) > 1}
    )
    assert rec.epoch == max(claims)
