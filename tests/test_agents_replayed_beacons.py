"""Replayed beacons of a dead leader after a restart (issue 40, finding 5), on a real 3-agent site.

Someone on the LAN captures 100 of the leader's signed beacons; the leader dies (kill -9), both
followers are restarted (kill -9, started again), junk is put over the lease, and the captured
beacons are sent again as the restarted members come up, one each 0.3 s. Each follower restarts
remembering the renewal it last read, as a quiet follower left it before this issue (it read no
renewal while the beacons vouched: its `seen` is set back to before the first one captured), so
every replayed renewal is newer than what it remembers. Before: every board forgot its seqs on
the restart and took each replay as news, each newer renewal restarted the timer (`vouched`),
and the takeover came after 36.1 s instead of 9.5 s (TTL 3). Now the boards keep their seqs in
DATA_DIR and refuse the replays ("kept"); with the kept seqs damaged ("damaged": the boards start
empty, counted, and take the replays), the bound on vouched restarts (one TTL in all since the
last valid read) holds the takeover the same: a new leader within TTL + HEARTBEAT_TTL of the
restart's start-up either way. (A quiet follower now keeps its renewal current with the beacons,
`tests/test_decide.py`; that alone would leave the replays nothing newer to name.)"""

import json
import threading
import time
from dataclasses import replace

import pytest
from beacon_replay import capture, replay
from harness import KMSN, wait_until

from elections.core.beacons import parse_beacon
from elections.ports.beacons.beacon_seqs import SEQS_NAME
from elections.ports.local.localstate import LocalState

pytestmark = pytest.mark.agents

CAPTURE = 100


BROADCAST = "127.255.255.255"


def pool_view(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.parametrize("kept", ["kept", "damaged"])
def test_replayed_captured_beacons_do_not_hold_off_a_takeover_after_the_followers_restart(site_factory, kept):
    site = site_factory(3)  # TTL 3, renew 1, poll 0.5; HEARTBEAT_TTL = TTL; beacons every 0.2 s
    site.start()
    first = site.wait_settled(timeout=60)
    leader = site.by_name(first.node)
    followers = [a for a in site.agents if a is not leader]
    port = int(leader.setting("RELAY_PORT")) + 2
    ttl = float(leader.setting("LEASE_TTL"))
    captured = capture(BROADCAST, port, leader.name, CAPTURE, site.token, KMSN, within=CAPTURE * 0.6 + 10)
    assert len(captured) == CAPTURE, f"only {len(captured)} of {leader.name}'s beacons captured"
    renewals = {parse_beacon(d, site.token, KMSN).renew_seq for d in captured}
    assert len(renewals) >= 10, f"the captured beacons name {len(renewals)} renewals"
    wait_until(lambda: all((f.data_dir / SEQS_NAME).exists() for f in followers), 5, "the kept seqs")

    leader.kill9()
    for follower in followers:
        follower.kill9()
    (site.lease_dir / "relay_leader.json").write_bytes(b"\x00junk over the lease, no key\n")
    for follower in followers:  # as a quiet follower left it before issue 40: the renewal it last read
        state = LocalState(follower.data_dir)
        state.write_leadership(
            replace(state.leadership(), seen=(leader.name, first.epoch, min(renewals) - 1))
        )
    if kept == "damaged":
        for follower in followers:
            (follower.data_dir / SEQS_NAME).write_bytes(b'{"v":1,"seqs":{"S0')
    pids = {f.name: f.state().get("pid") for f in followers}
    stop = threading.Event()
    # Each newer renewal replayed as the timer it would restart runs out: 100 beacons over ~30 s.
    sender = threading.Thread(
        target=replay, args=(captured, BROADCAST, port, leader.ip, 0.3, stop), daemon=True
    )
    restarted = time.monotonic()
    for follower in followers:
        follower.start()
    try:

        def worker_up() -> float | None:
            fresh = [f for f in followers if f.state().get("pid") not in (None, pids[f.name])]
            return time.monotonic() if fresh else None

        up = wait_until(worker_up, 60, "a restarted worker")
        sender.start()  # as the restarted members beacon again: the replayer hears them come back
        new = site.wait_leader(timeout=60, min_epoch=first.epoch + 1)
        took = time.monotonic()
    finally:
        stop.set()
        sender.join(5)
    assert new.node != leader.name
    assert took - up <= ttl + ttl + 1.0, (  # TTL + HEARTBEAT_TTL (= TTL), 1 s for the claim and the look
        f"new leader {took - up:.1f} s after the restarted worker was up ({up - restarted:.1f} s of "
        f"start-up)\n{site.logs()}"
    )
    views = [pool_view(f) for f in followers]
    replayed = sum((v.get("refusals") or {}).get("counts", {}).get("replayed", 0) for v in views)
    deferred = [((v.get("beacons") or {}).get("serving") or {}).get("deferred", {}) for v in views]
    if kept == "kept":  # the boards refused what they had accepted before the restart: nothing vouched
        assert replayed > 0 and not any(d.get("vouched") for d in deferred), (replayed, deferred)
    else:  # taken as news, each newer renewal restarted a timer: for one TTL in all
        counts = [(v.get("refusals") or {}).get("counts", {}) for v in views]
        assert all(c.get("not_json", 0) >= 1 for c in counts), counts  # the damaged file, counted
        assert any(d.get("vouched") for d in deferred), deferred
    logs = "".join(f.log() for f in followers)
    assert "Traceback" not in logs
