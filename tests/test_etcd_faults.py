"""etcd faults under a pool of real contender processes (docs/design.md §5.2): quorum
lost, one contender partitioned from etcd, members killed (the etcd leader
among them), etcd paused. Whatever happens: one leader at most, no epoch taken
twice, the leader stops by its deadline when it cannot renew, and the pool
recovers when etcd does. Longer and randomized runs are marked `chaos`."""

from __future__ import annotations

import random
import signal
import time

import pytest
from etcd import EtcdContender, TcpProxy, assert_one_leader_at_most, etcd_pool, read_etcd_lease, unique_prefix
from harness import TOKEN, wait_until

TIMING = {"ttl": 3, "renew": 1, "poll": 0.5, "deadline": 2, "timeout": 1}


class Pool:
    def __init__(self, cluster, workdir, n=3, endpoints=None):
        self.cluster = cluster
        self.prefix = unique_prefix()
        self.store = etcd_pool(cluster.endpoints, self.prefix, timeout=1.0)
        self.contenders = [
            EtcdContender(
                (endpoints or {}).get(f"C{i}", cluster.endpoints), self.prefix, f"C{i}", workdir, TIMING
            )
            for i in range(1, n + 1)
        ]

    def lease(self):
        try:
            read = read_etcd_lease(self.store, TOKEN)
        except Exception:  # etcd down: nobody can be seen to lead
            return None
        rec = read.record
        return rec if read.status == "valid" and rec is not None and not rec.released else None

    def leader(self, other_than=None, min_epoch=0, timeout=20.0):
        def found():
            rec = self.lease()
            return rec if rec and rec.node != other_than and rec.epoch >= min_epoch else None

        return wait_until(found, timeout, f"a leader (other than {other_than}, epoch >= {min_epoch})")

    def by_node(self, node):
        return next(c for c in self.contenders if c.node == node)

    def stepped_down(self, node, epoch):
        return [e for e in self.by_node(node).events_of("stepped_down") if e["epoch"] == epoch]

    def stop(self):
        for c in self.contenders:
            c.stop()

    def logs(self):
        return "\n".join(f"===== {c.node}\n{c.log()[-3000:]}" for c in self.contenders)


@pytest.fixture
def pool_on(etcd_faults, tmp_path):
    pools = []

    def make(cluster=None, **kw):
        pools.append(Pool(cluster or etcd_faults(), tmp_path, **kw))
        return pools[-1]

    yield make
    for p in pools:
        p.stop()


def elapsed_since(t):
    return time.monotonic() - t


def test_quorum_loss_stops_the_leader_by_its_deadline_and_a_leader_returns_within_ttl_plus_2s(pool_on):
    pool = pool_on()
    first = pool.leader()
    seq = first.renew_seq
    wait_until(lambda: (pool.lease() or first).renew_seq > seq, 5, "a renewal")
    cluster = pool.cluster
    leader_member = cluster.leader_index()
    other = next(j for j in range(3) if j != leader_member)
    for i in (other, leader_member):
        cluster.kill(i)  # two of three gone, the etcd leader among them: no quorum
    lost_at = time.monotonic()
    wait_until(lambda: pool.stepped_down(first.node, first.epoch), TIMING["deadline"] + 2.5,
               "the leader to step down by its deadline")  # fmt: skip
    assert "deadline" in pool.stepped_down(first.node, first.epoch)[0]["reason"]
    time.sleep(max(0.0, lost_at + TIMING["ttl"] + 1 - time.monotonic()))  # an outage past the TTL
    assert not any(c.events_of("elected")[1:] for c in pool.contenders if c.node == first.node)
    assert sum(len(c.events_of("elected")) for c in pool.contenders) == 1, (
        "someone was elected without quorum"
    )
    for i in range(3):
        if not cluster.members[i].alive():
            cluster.restart(i)
    wait_until(cluster.healthy, 20, "etcd to have a quorum again")
    back_at = time.monotonic()
    new = pool.leader(min_epoch=first.epoch + 1, timeout=TIMING["ttl"] + 2 + 3)
    took = elapsed_since(back_at)
    assert took <= TIMING["ttl"] + 2 + 1.0, f"a leader {took:.1f} s after quorum returned"
    assert new.epoch == first.epoch + 1
    assert_one_leader_at_most(pool.contenders)


def test_a_leader_partitioned_from_etcd_steps_down_and_another_takes_over_once(pool_on, etcd_faults):
    cluster = etcd_faults()
    proxies = [TcpProxy(m.client_port) for m in cluster.members]
    try:
        # C1 reaches etcd only through the proxies, so it can be cut off alone; it leads first.
        pool = pool_on(cluster, n=1, endpoints={"C1": ",".join(p.url for p in proxies)})
        first = pool.leader()
        assert first.node == "C1"
        workdir = pool.contenders[0].events.parent
        pool.contenders += [
            EtcdContender(cluster.endpoints, pool.prefix, f"C{i}", workdir, TIMING) for i in (2, 3)
        ]
        wait_until(lambda: all(c.log() and "follow" in c.log() for c in pool.contenders[1:]), 15, "followers")
        for p in proxies:
            p.cut()
        cut_at = time.monotonic()
        wait_until(lambda: pool.stepped_down("C1", first.epoch), TIMING["deadline"] + 2.0,
                   "the partitioned leader to step down")  # fmt: skip
        assert elapsed_since(cut_at) <= TIMING["deadline"] + 2.0
        new = pool.leader(other_than="C1", timeout=TIMING["ttl"] + 5)
        assert new.epoch == first.epoch + 1
        for p in proxies:
            p.heal()
        wait_until(lambda: "follow" in pool.by_node("C1").log().rsplit("stepping down", 1)[-1], 15,
                   "the old leader to follow after the partition heals")  # fmt: skip
        assert pool.lease().node == new.node
        assert_one_leader_at_most(pool.contenders)
    finally:
        for p in proxies:
            p.stop()


# -- longer runs (make chaos) -------------------------------------------------------------
@pytest.mark.chaos
def test_killing_the_etcd_leader_member_keeps_one_leader_and_its_epoch(pool_on):
    pool = pool_on()
    first = pool.leader()
    cluster = pool.cluster
    for _ in range(3):
        i = cluster.leader_index()
        cluster.kill(i)
        wait_until(lambda: cluster.leader_index() is not None, 15, "a new etcd leader")
        time.sleep(TIMING["ttl"])
        cluster.restart(i)
        wait_until(cluster.healthy, 20, "the member to rejoin")
    assert_one_leader_at_most(pool.contenders)
    rec = pool.leader()
    assert rec.epoch >= first.epoch


@pytest.mark.chaos
def test_pausing_all_of_etcd_stops_the_leader_and_the_pool_recovers(pool_on):
    pool = pool_on()
    first = pool.leader()
    cluster = pool.cluster
    for i in range(3):
        cluster.pause(i)
    time.sleep(2 * TIMING["ttl"])
    assert pool.stepped_down(first.node, first.epoch), "the leader kept leading without etcd"
    for i in range(3):
        cluster.resume(i)
    wait_until(cluster.healthy, 20, "etcd back")
    new = pool.leader(min_epoch=first.epoch + 1, timeout=TIMING["ttl"] + 5)
    assert new.epoch == first.epoch + 1
    assert_one_leader_at_most(pool.contenders)


@pytest.mark.chaos
def test_random_member_kills_pauses_and_contender_freezes_never_make_two_leaders(pool_on):
    rng = random.Random(int(time.time()))
    pool = pool_on(n=4)
    pool.leader()
    cluster = pool.cluster
    until = time.monotonic() + 90
    while time.monotonic() < until:
        fault = rng.choice(["kill", "pause", "freeze"])
        if fault == "kill":
            i = rng.randrange(3)
            cluster.kill(i)
            time.sleep(rng.uniform(0.5, 4))
            cluster.restart(i)
        elif fault == "pause":
            i = rng.randrange(3)
            cluster.pause(i)
            time.sleep(rng.uniform(0.5, 4))
            cluster.resume(i)
        else:
            c = rng.choice(pool.contenders)
            c.send(signal.SIGSTOP)
            time.sleep(rng.uniform(0.5, 6))
            c.send(signal.SIGCONT)
        wait_until(cluster.healthy, 30, "etcd to recover")
        time.sleep(rng.uniform(0, 2))
    pool.leader(timeout=15)
    assert_one_leader_at_most(pool.contenders)
