"""A replayed old lease with beacons off (issue 40, finding 6), on a real 3-agent site.

The leader (S001 or S002, epoch E) is killed and the other takes epoch E+1; then someone who
kept a copy of its signed lease file puts it back over the lease every 0.1 s for 6 s. The follower S003
refuses it (`lease_memory.outdated`: an epoch below one it saw), and before this issue still
published it in its pool view (`survey()`), which its entry follows: its entry re-pointed to
the dead leader's relay and back (33 times in 15 s; 31 of 75 remote registrations went to the
dead relay). Now a follower publishes only leases its memory took, and its entry never goes
back to an epoch below the highest it forwarded to: the view keeps naming E+1, the entry never
re-points."""

import json
import threading
import time

import pytest
from harness import free_port, wait_until

pytestmark = pytest.mark.agents


def read_json(path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def test_a_replayed_old_lease_never_shows_in_a_followers_view_nor_moves_its_entry(site_factory):
    site = site_factory(3, extra={"BEACON_INTERVAL": "0"})  # the share is the only witness
    s1, s2, s3 = site.agents
    for agent, priority in ((s1, 90), (s2, 80), (s3, 50)):
        with open(agent.ini, "a") as fh:
            fh.write(f"PRIORITY = {priority}\n")
    with open(s3.ini, "a") as fh:
        fh.write(f"ENTRY = 1\nENTRY_LISTEN = {s3.ip}:{free_port(s3.ip)}\n")
    s1.start()
    s2.start()
    first = site.wait_leader(timeout=60)  # S001 or S002; S003 (the entry) joins as a follower
    s3.start()
    assert site.wait_settled(timeout=60) == first
    leader, other = (s1, s2) if first.node == "S001" else (s2, s1)
    lease_path = site.lease_dir / "relay_leader.json"
    old = lease_path.read_bytes()  # S001's signed lease of epoch E, as anyone on the share can copy it

    def entry_target() -> dict:
        return read_json(s3.data_dir / "entry.json").get("target") or {}

    wait_until(lambda: entry_target().get("node") == leader.name, 30, "S003's entry to forward to the leader")
    leader.kill9()
    new = site.wait_leader(timeout=30, other_than=leader.name)
    assert (new.node, new.epoch) == (other.name, first.epoch + 1), new  # PRIORITY: S003 waits longer
    wait_until(lambda: entry_target().get("node") == other.name, 15, "S003's entry to forward to the new one")
    wait_until(lambda: (read_json(s3.data_dir / "pool.json").get("lease") or {}).get("epoch") == new.epoch,
               10, "S003's view of the new lease")  # fmt: skip
    repointed = read_json(s3.data_dir / "entry.json")["repointed"]

    stop = threading.Event()

    def replay() -> None:
        while not stop.wait(0.1):
            lease_path.write_bytes(old)  # in place, as a careless tool (or a hostile one) would

    sender = threading.Thread(target=replay, daemon=True)
    sender.start()
    shown: list[tuple[str, int]] = []
    targets: list[tuple[str, int]] = []
    try:
        end = time.monotonic() + 6.0
        while time.monotonic() < end:
            lease = read_json(s3.data_dir / "pool.json").get("lease") or {}
            if lease:
                shown.append((lease.get("node"), lease.get("epoch")))
            target = entry_target()
            if target:
                targets.append((target.get("node"), target.get("epoch")))
            time.sleep(0.02)
    finally:
        stop.set()
        sender.join(5)
    # With beacons off the share is the only witness: a follower whose every look falls on the replayed
    # copy may rightly take the next epoch once the live leader's lease has run out unseen
    # (docs/serving-right.md, "the share is the only witness"). What must never be is the replayed
    # lease in its view, or its entry going back to it: no epoch below the one it had accepted, in the
    # view or the entry's target.
    assert shown and all(epoch >= new.epoch for _, epoch in shown), sorted(set(shown))
    assert (leader.name, first.epoch) not in shown, sorted(set(shown))
    assert targets and all(epoch >= new.epoch and node != leader.name for node, epoch in targets), sorted(
        set(targets)
    )
    status = read_json(s3.data_dir / "entry.json")
    wait_until(lambda: read_json(s3.data_dir / "entry.json").get("updated") != status.get("updated"), 5,
               "entry.json written after the replay")  # fmt: skip
    status = read_json(s3.data_dir / "entry.json")
    final = status.get("target") or {}
    assert final.get("node") != leader.name and final.get("epoch", 0) >= new.epoch, status
    assert status["repointed"] - repointed in (0, 1), status  # at most the next epoch, never back
    logs = s3.log()
    assert "SECURITY: ignoring replayed lease" in logs, "the replay was seen, refused and said"
    assert "Traceback" not in logs

    # The pool goes on under the new leader (it rewrites its record over the replayed copies).
    def rewritten():  # type: ignore[no-untyped-def]
        lease = site.lease()  # the last replayed copy may still be there until the leader's next look
        return lease if lease is not None and lease.epoch >= new.epoch else None

    back = wait_until(rewritten, 10, "the new leader's lease over the last replayed copy")
    assert back.epoch >= new.epoch and back.node != leader.name, back


@pytest.mark.long
def test_an_older_epochs_holder_that_still_writes_keeps_a_follower_from_the_lease_path(site_factory):
    """Issue 37 (SPIN's trail of the lockless renewal): a leader's renewal without the lock can land
    over the next epoch's claim, and that leader renews on; its records name an epoch below what the
    others know. A follower that timed the lease out through those writes took the next epoch by the
    lease while the old leader's gate could be open. Here the test writes, with the pool's key, what
    such a leader writes (its own epoch, renew_seq growing each second) once the epoch after it has
    no live holder: the last follower does not take the lease while the writes go on, and takes it
    one TTL after they stop. Within the bound (issue 37, the archive replayer: such restarts move a
    follower's timer at most one TTL past where it stood, `lease_memory.older_restart`): here the
    writes last a third of a TTL; past the bound the takeover serves by acks
    (`tests/test_older_writer_replay.py`)."""
    from harness import write_lease

    site = site_factory(3, extra={"BEACON_INTERVAL": "0"})  # the share alone: the lease path
    s1, s2, s3 = site.agents
    for agent, priority in ((s1, 90), (s2, 80), (s3, 50)):
        with open(agent.ini, "a") as fh:
            fh.write(f"PRIORITY = {priority}\n")
    s1.start()
    first = site.wait_leader(timeout=60)
    s2.start()
    s3.start()
    assert site.wait_settled(timeout=60) == first
    s1.kill9()
    second = site.wait_leader(timeout=30, other_than=s1.name)
    assert (second.node, second.epoch) == (s2.name, first.epoch + 1), second
    wait_until(lambda: (read_json(s3.data_dir / "pool.json").get("lease") or {}).get("epoch") == second.epoch,
               15, "S003's view of the second epoch")  # fmt: skip
    s2.kill9()
    seq = 1000
    end = time.monotonic() + 1.0  # a third of a TTL (3 s) of the old holder writing on: within the bound
    while time.monotonic() < end:
        seq += 1
        write_lease(site.lease_dir, s1.name, s1.ip, 9530, first.epoch, renew_seq=seq, ttl_s=3)
        assert not s3.state().get("leader"), f"S003 took the lease while epoch {first.epoch}'s holder writes"
        time.sleep(0.5)  # the old holder's renewal period, not a wait for a condition
    stopped = time.monotonic()
    third = site.wait_leader(timeout=30, min_epoch=second.epoch + 1)
    took = time.monotonic() - stopped
    assert third.node == s3.name and third.epoch == second.epoch + 1, third
    assert took >= 2.5, f"taken {took:.1f} s after the last write: the TTL (3 s) counts from it"
    logs = s3.log()
    assert "that holder still writes" in logs, "the restart was said"
    assert "Traceback" not in logs
