"""Retiring a member with `relayctl forget` on real agents: refused while the member's
heartbeat is fresh or while it holds the lease; once it is gone (kill -9) and stale,
its member record is removed from the share and every agent stops listing it,
while its history (its event file, every agent's rows of it) stays and the command
is in the audit trail. A member of that name that comes back is a member again
(no agent refuses its new heartbeats as replays of the old ones)."""

import json

import pytest
from harness import wait_until
from test_agents_audit import relayctl

pytestmark = [pytest.mark.agents]

HOLD = 1  # PROMOTION_HOLD: stale after HEARTBEAT_TTL (= LEASE_TTL 3) + 1 s


def view(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "pool.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.long
def test_relayctl_forget_retires_a_gone_member_and_refuses_a_live_one(site_factory):
    site = site_factory(3, extra={"PROMOTION_HOLD": str(HOLD)})
    site.start()
    lease = site.wait_settled()
    old = site.by_name(lease.node)
    a, b = (x for x in site.agents if x is not old)
    wait_until(lambda: all(len(view(x).get("members", {})) == 3 for x in site.agents), 20, "every view has 3")

    code, out = relayctl(a, "forget", b.name)  # alive: refused
    assert code == 1 and out["code"] == "refused" and "heartbeat is fresh" in out["message"], out
    code, out = relayctl(a, "forget", old.name)  # alive and leading
    assert code == 1 and "holds the lease" in out["message"], out

    old.kill9()
    new = site.wait_leader(timeout=30, other_than=old.name)
    wait_until(lambda: (view(a)["members"][old.name].get("age") or 0) > 3 + HOLD, 20, f"{old.name} stale")
    assert (site.lease_dir / "members" / f"{old.name}.json").exists()
    code, out = relayctl(a, "forget", old.name, "--reason", "motherboard dead")
    assert code == 0 and out["code"] == "accepted", out
    assert not (site.lease_dir / "members" / f"{old.name}.json").exists()
    for x in (a, b):
        wait_until(lambda x=x: old.name not in view(x).get("members", {}), 15, f"{x.name} drops {old.name}")
    code, listed = relayctl(b, "list")
    assert sorted(listed["members"]) == sorted([a.name, b.name]) and listed["lease"]["node"] == new.node

    # Its history stays: its own event file, and its rows in every agent's history.
    assert (site.lease_dir / "events" / f"{old.name}.jsonl").exists()
    for x in (a, b):
        rows = x.history()
        assert ("elected", lease.epoch) in [(k, e) for k, e, _ in rows], rows
        wait_until(lambda x=x: any(k == "forget_requested" for k, _, _ in x.history()), 15, "the forget row")
    code, history = relayctl(b, "history", "-n", "200")
    forget = [r for r in history if r["kind"] == "forget_requested"]
    assert forget and forget[0]["target"] == old.name and forget[0]["reason"] == "motherboard dead"
    assert forget[0]["client"].startswith("cli@") and forget[0]["epoch"] >= lease.epoch

    # It comes back: a member again, its fresh heartbeats believed.
    old.start()
    for x in (a, b):
        wait_until(lambda x=x: view(x).get("members", {}).get(old.name, {}).get("eligible"), 40,
                   f"{x.name} sees {old.name} eligible again")  # fmt: skip
        recent = view(x).get("refusals", {}).get("recent") or []
        assert not [r for r in recent if old.name in str(r.get("source"))], recent
