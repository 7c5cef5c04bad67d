"""Many real contender processes on one lease dir (the same elector the agents run)."""

import signal
import time

import pytest
from harness import Contender, live_lease, signed_lock, wait_until

QUICK = {"ttl": 2, "renew": 0.5, "poll": 0.2, "deadline": 1.5}


@pytest.fixture
def contenders(tmp_path):
    procs = []

    def start(n, lease_dir, timing=QUICK, prefix="N"):
        for i in range(n):
            procs.append(Contender(lease_dir, f"{prefix}{i:02d}", tmp_path, timing))
        return procs

    yield start
    for p in procs:
        p.stop()


def test_twenty_contenders_elect_exactly_one_and_fifty_reelections_never_reuse_an_epoch(tmp_path, contenders):
    lease_dir = tmp_path / "socket"
    lease_dir.mkdir()
    procs = contenders(20, lease_dir)
    first = wait_until(lambda: live_lease(lease_dir), 30, "a first leader")
    # Give every contender time to have looked at least twice: still one winner.
    wait_until(lambda: all(p.log_path.stat().st_size > 0 for p in procs), 20, "all contenders to log")
    time.sleep(1.0)
    winners = [p.node for p in procs if p.events_of("elected")]
    assert winners == [first.node], winners
    by_node = {p.node: p for p in procs}
    epochs = [first.epoch]
    for _ in range(50):
        current = live_lease(lease_dir)
        assert current is not None
        by_node[current.node].send(signal.SIGUSR1)  # release and sit out one election
        nxt = wait_until(
            lambda c=current: (r := live_lease(lease_dir)) and r.epoch > c.epoch and r,
            15,
            f"a re-election after epoch {current.epoch}",
        )
        assert nxt.node != current.node
        epochs.append(nxt.epoch)
    assert epochs == sorted(set(epochs)), f"epochs did not strictly increase: {epochs}"
    elected = [(e["epoch"], p.node) for p in procs for e in p.events_of("elected")]
    taken = [epoch for epoch, _ in elected]
    assert len(taken) == len(set(taken)), f"an epoch was taken by two nodes: {sorted(elected)}"
    assert set(epochs) <= set(taken)


def test_a_lock_left_by_a_dead_acquirer_delays_the_election_by_a_bounded_time(tmp_path, contenders):
    lease_dir = tmp_path / "socket"
    lease_dir.mkdir()
    (lease_dir / "relay_leader.lock").write_text(signed_lock("GONE", 999999, "x"))
    started = time.monotonic()
    contenders(3, lease_dir)
    rec = wait_until(lambda: live_lease(lease_dir), 15, "a leader despite the stale lock")
    took = time.monotonic() - started
    # Stated bound: the lock's staleness bound (2 s) + a poll + a backoff + process start-up.
    assert took < 2.0 + 0.2 + 1.0 + 3.0, took
    assert rec.epoch == 1
    assert not (lease_dir / "relay_leader.lock").exists() or live_lease(lease_dir)


def test_a_contender_takes_its_pool_key_from_the_environment_or_a_file_and_refuses_it_on_argv(tmp_path):
    import os
    import subprocess

    from harness import PY, ROOT, TOKEN

    lease_dir = tmp_path / "socket"
    lease_dir.mkdir()
    argv = [PY, "-m", "elections.runtime.contend", "--dir", str(lease_dir), "--node", "N01"]
    env = {k: v for k, v in os.environ.items() if k != "STK_RELAY_TOKEN"}
    refused = subprocess.run([*argv, "--token", TOKEN], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=60)  # fmt: skip
    assert refused.returncode == 2 and "--token is no longer accepted" in refused.stderr
    none = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert none.returncode == 2 and "no pool key" in none.stderr
    assert not (lease_dir / "relay_leader.json").exists()
    key = tmp_path / "key"
    key.write_text(TOKEN + "\n")
    with open(tmp_path / "N01.log", "wb") as log:
        proc = subprocess.Popen([*argv, "--token-file", str(key)], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        lease = wait_until(
            lambda: live_lease(lease_dir), 30, "the contender to lead with the key from its file"
        )
        assert lease.node == "N01"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
