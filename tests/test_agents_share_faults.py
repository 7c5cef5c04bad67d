"""The share faults a site's file server really has, on real agents in network
namespaces, each seeing the share through its own faulty view (tests/netns.py,
tests/faultyfs.py), judged like the chaos run by what clients saw
(tests/chaos_checker.py):

- followers whose view of the share serves stale copies (as NFS attribute
  caching does, here for twice the TTL) never take a live lease;
- a share that stalls for 1-5 s at random while the leader renews never
  gives two serving leaders, and the pool serves again once it answers.
"""

import random
import time

import pytest
from chaos_checker import check, load
from chaos_clients import History, Prober
from harness import KMSN, TOKEN, wait_until
from netns import RELAY_PORT

pytestmark = pytest.mark.agents

TTL = 3.0  # the fast profile


@pytest.mark.long
def test_stale_reads_and_random_stalls_never_give_two_serving_leaders(netns_site, tmp_path):
    site = netns_site(3, share="lan")
    site.start()
    lease = site.wait_settled(timeout=60)
    leader = site.by_name(lease.node)
    history = History(tmp_path / "history.jsonl")
    probers = [
        Prober(history, a.name, a.ip, RELAY_PORT, KMSN, TOKEN, enter=site.observer.enter) for a in site.agents
    ]
    for prober in probers:
        prober.start()
    try:
        wait_until(
            lambda: probers[site.agents.index(leader)].last_ok_invoked >= 0, 10, "a probe of the leader"
        )
        # 1. Stale reads on both followers, each copy served up to 2 x TTL old, for 3 x TTL.
        followers = [a for a in site.agents if a is not leader]
        for agent in followers:
            site.share_faults(agent, "stale", [{"path": "/socket/*", "stale": 2 * TTL}])
        stale_until = history.now() + 3 * TTL
        while history.now() < stale_until:
            rec = site.lease()  # None for a moment while an election moves the lease aside
            assert rec is None or (rec.node, rec.epoch) == (lease.node, lease.epoch), rec
            time.sleep(0.2)  # sampling the lease while the copies are stale
        for agent in followers:
            site.share_faults(agent, "stale", [])
        # 2. Stalls of 1-5 s at random, on the leader's view or the whole file server.
        rng = random.Random(11)
        for n in range(3):
            holder = site.lease()
            views = site.agents if holder is None or rng.random() < 0.3 else [site.by_name(holder.node)]
            history.record("info", "fault", phase="start", fault=n, kind="share_hang", target=len(views))
            for agent in views:
                site.share_faults(agent, "stall", [{"hang": True}])
            time.sleep(rng.uniform(1.0, 5.0))
            for agent in views:
                site.share_faults(agent, "stall", [])
            history.record("info", "fault", phase="end", fault=n, kind="share_hang", target=len(views))
            time.sleep(rng.uniform(0.3, 1.5))
        served_after = history.now()
        wait_until(
            lambda: max(p.last_ok_invoked for p in probers) >= served_after, 15, "the pool to serve again"
        )
    finally:
        for prober in probers:
            prober.stop()
        history.close()
    report = check(load(history.path.read_text().splitlines()), {"share_hang": 12.0})
    assert report.ok, report.violations
    assert report.counts["probe"] > 20
