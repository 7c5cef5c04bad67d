"""A damaged or forged lease while the leader lives: no crash, no re-election,
the leader rewrites its own record (same epoch) at its next renewal."""

import json
import os

import pytest
from harness import live_lease, read_lease, wait_until

from elections.core.lease import sign

pytestmark = pytest.mark.agents


def test_damaged_and_forged_leases_are_ignored_and_overwritten_by_the_leader(site_factory):
    site = site_factory(3)  # TTL 3, renew 1, poll 0.5
    site.start()
    lease = site.wait_settled()
    leader = site.by_name(lease.node)
    path = site.lease_dir / "relay_leader.json"
    good = json.loads(path.read_bytes())
    raw = path.read_bytes()

    forged = {k: v for k, v in good.items() if k != "sig"}
    forged.update(node="S003" if lease.node != "S003" else "S002", ip="127.0.0.99", epoch=lease.epoch + 50)
    forged["sig"] = sign(forged, "not-the-site-token")
    damages = {
        "truncated": raw[: len(raw) // 2],
        "empty": b"",
        "not json": b"\x00garbage\xff",
        "wrongly signed": json.dumps(dict(good, sig="0" * 64)).encode(),
        "forged": json.dumps(forged).encode(),
    }
    for what, data in damages.items():
        with open(path, "wb") as fh:  # written in place, as a careless tool would
            fh.write(data)
        assert read_lease(site.lease_dir).status in ("corrupt", "forged"), what
        back = wait_until(lambda: live_lease(site.lease_dir), 5, f"the leader to rewrite a {what} lease")
        assert (back.node, back.epoch) == (lease.node, lease.epoch), what
    # Nobody took over, nobody crashed, and the log says what happened.
    assert all(a.alive() for a in site.agents)
    assert [a.name for a in site.agents if a.state().get("leader")] == [lease.node]
    logs = "".join(a.log() for a in site.agents)
    assert "ignoring damaged lease" in logs
    assert "SECURITY: ignoring forged lease" in logs
    assert "Traceback" not in logs
    assert leader.state()["epoch"] == lease.epoch


def test_a_deleted_lease_is_rewritten_without_a_new_epoch(site_factory):
    site = site_factory(3)
    site.start()
    # Once every follower has seen the valid record, its vanishing is "no evidence".
    lease = site.wait_settled()
    os.unlink(site.lease_dir / "relay_leader.json")
    back = wait_until(lambda: live_lease(site.lease_dir), 5, "the lease to come back")
    assert (back.node, back.epoch) == (lease.node, lease.epoch)
