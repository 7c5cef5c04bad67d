"""WEBHOOK_URL across the pool, with real agents and a real HTTP receiver on loopback: a drain
issued on a follower is posted once, by the leader of its epoch, and runs the drained leader's
ON_ROLE_CHANGE; a flood of forged datagrams is a few coalesced security events, not a POST
each; a full queue drops its oldest event, counted and audited; and the queue outlives a
kill -9 of the agent (at-least-once, same ids)."""

import hashlib
import hmac
import json
import re
import time

import pytest
from harness import FAST, KMSN, wait_until
from test_agents_audit import relayctl
from test_agents_beacons import flood, pool_view
from test_agents_notify import SECRET, Receiver, audit_rows, role_script

pytestmark = pytest.mark.agents


@pytest.fixture
def receiver_factory():
    made = []

    def make(**kw):
        made.append(Receiver(**kw))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def hook(receiver, **more):
    return {"WEBHOOK_URL": receiver.url, "WEBHOOK_SECRET": SECRET, **more}


def docs(receiver, kind=None):
    out = [json.loads(b) for _, b in receiver.posts]
    return [d for d in out if kind is None or d["kind"] == kind]


def counter(agent, outcome):
    text = agent.urlopen("/metrics").read().decode()
    found = re.search(
        rf'^stkrelay_webhook_events_total{{kmsn="{KMSN}",outcome="{outcome}"}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else None


@pytest.mark.long
def test_a_drain_issued_on_a_follower_is_posted_once_by_the_leader_and_runs_the_drained_ones_command(
    site_factory, receiver_factory, tmp_path
):
    receiver = receiver_factory()
    out = tmp_path / "roles.txt"
    script = role_script(tmp_path / "on-role.sh", f'echo "$STK_NODE $STK_ROLE $STK_CAUSE" >> {out}\n')
    site = site_factory(2, extra=hook(receiver, ON_ROLE_CHANGE=script))
    site.start()
    lease = site.wait_leader(timeout=40)
    leader = site.by_name(lease.node)
    follower = next(a for a in site.agents if a is not leader)
    wait_until(
        lambda: pool_view(follower).get("lease", {}).get("node") == leader.name, 20, "the follower's view"
    )
    code, doc = relayctl(follower, "drain", leader.name, "--reason", "maintenance")
    assert code == 0 and doc["result"] == "accepted", doc
    # The leader hands off to the follower. Each agent's queue is FIFO and the drain's row comes
    # before the step-down in the leader's history and before the election in the follower's: once
    # both of those are delivered, any POST of the drain by either agent was delivered before them.
    new = site.wait_leader(timeout=20, other_than=leader.name)

    def both_past_the_drain():
        mine = [d for d in docs(receiver) if d["node"] == leader.name and d["kind"] != "elected"]
        theirs = [d for d in docs(receiver, "elected") if d["epoch"] == new.epoch]
        return mine and theirs

    wait_until(both_past_the_drain, 20, "the leader's step-down and the follower's election")
    drains = docs(receiver, "drain_requested")
    assert len(drains) == 1, drains
    (drain,) = drains
    assert drain["id"] == f"{KMSN}/{follower.name}/{drain['seq']}", drain
    assert (drain["node"], drain["sender"], drain["epoch"]) == (follower.name, leader.name, lease.epoch), (
        drain
    )
    assert drain["detail"]["target"] == leader.name and drain["reason"] == "maintenance"
    # The drained leader's ON_ROLE_CHANGE said "draining", though the drain was issued on the follower.
    wait_until(lambda: out.exists() and f"{leader.name} draining drain_requested" in out.read_text(), 15,
               "the drained leader's role command")  # fmt: skip
    wait_until(lambda: f"{follower.name} leader " in out.read_text(), 15, "the new leader's role command")


@pytest.mark.long
def test_a_flood_of_forged_datagrams_is_a_few_coalesced_signed_security_events(
    site_factory, receiver_factory
):
    receiver = receiver_factory()
    site = site_factory(2, timing=FAST, extra=hook(receiver, WEBHOOK_SECURITY_EVERY="2"))
    site.start()
    lease = site.wait_leader(timeout=40)
    leader = site.by_name(lease.node)
    wait_until(lambda: docs(receiver, "elected"), 20, "the election's POST")
    before = pool_view(leader).get("refusals", {}).get("counts", {})
    assert not docs(receiver, "security") and not any(before.values()), before
    port = int(leader.setting("RELAY_PORT")) + 2
    started = time.monotonic()
    sent = flood(leader.ip, port, 4.0, per_second=2000)
    flooded = time.monotonic() - started
    first = wait_until(lambda: docs(receiver, "security"), 10, "the first security event")[0]
    # After the flood: the last window's refusals come in one more event, then nothing.
    totals = wait_until(lambda: pool_view(leader).get("refusals", {}).get("counts"), 10, "the counts")

    def carried():
        total = {}
        for d in docs(receiver, "security"):
            for cause, n in d["detail"]["counts"].items():
                total[cause] = total.get(cause, 0) + n
        now = pool_view(leader).get("refusals", {}).get("counts", {})
        return total == now and now

    totals = wait_until(carried, 15, "every refusal carried by the security events")
    events = docs(receiver, "security")
    assert sum(totals.values()) >= 1000, (sent, totals)
    # 2000 refusals a second for 4 s: at most one event at once, then one per 2 s window.
    assert 1 <= len(events) <= 2 + (flooded + 6) / 2, [(d["at"], d["detail"]["counts"]) for d in events]
    shown = (first["kind"], first["node"], first["sender"], first["seq"])
    assert shown == ("security", leader.name, leader.name, None), first
    assert first["id"].startswith(f"{KMSN}/{leader.name}/security/") and len(
        {d["id"] for d in events}
    ) == len(events)
    assert first["detail"]["recent"] and first["detail"]["recent"][0]["cause"], first
    for headers, body in receiver.posts:
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["X-Stkrelay-Signature"], expected)
    assert leader.state().get("leader") is True and site.lease().epoch == lease.epoch


@pytest.mark.long
def test_a_full_queue_drops_its_oldest_counted_and_audited_and_the_queue_outlives_a_kill_9(
    site_factory, receiver_factory
):
    receiver = receiver_factory(hang=True)  # holds the first POST (the election) open
    site = site_factory(1, timing=FAST, extra=hook(receiver, WEBHOOK_QUEUE="2", WEBHOOK_TIMEOUT="60",
                                                     BEACON_INTERVAL="0"))  # fmt: skip
    site.start()
    lease = site.wait_leader(timeout=40)
    agent = site.agents[0]
    assert receiver.held.wait(20), "the election's POST never came"
    ids = []
    for cmd in ("pause", "resume", "pause", "resume"):  # four events behind the held one, in a queue of 2
        code, out = relayctl(agent, cmd, "--reason", f"queue {cmd}")
        assert code == 0 and out["result"] == "accepted", out
        ids.append(out["correlation"])
    wait_until(lambda: (counter(agent, "dropped") or 0) == 3, 15, "the drops counted")

    def dropped_rows():
        return [r for r in audit_rows(agent) if r[0] == "webhook" and r[1] == "outcome"]

    rows = wait_until(dropped_rows, 15, "the drop's audit row")
    assert rows[0][2] == "error" and "dropped" in rows[0][3] and "2 events wait" in rows[0][3], rows
    queued = json.loads((agent.data_dir / "webhook-outbox.json").read_text())["queue"]
    assert [(d["kind"], d["detail"]["correlation"]) for d in queued] == [
        ("pause_requested", ids[2]), ("resume_requested", ids[3]),
    ]  # fmt: skip
    assert len(receiver.posts) == 1  # the sender is still held in the election's POST
    # kill -9 with two events queued; the receiver answers at once from now on; the agent comes back.
    agent.kill9()
    receiver.hang = False
    receiver.release.set()
    agent.start()
    site.wait_leader(timeout=30, min_epoch=lease.epoch + 1)
    wanted = {d["id"] for d in queued}
    wait_until(lambda: wanted <= {d["id"] for d in docs(receiver)}, 30, "the queued events after the restart")
    posted = {d["id"]: d for d in docs(receiver)}
    assert [
        posted[i]["detail"]["correlation"] for i in sorted(wanted, key=lambda i: int(i.rsplit("/", 1)[1]))
    ] == ids[2:]


@pytest.mark.long
def test_an_event_given_up_is_counted_audited_and_leaves_the_queue(site_factory, receiver_factory):
    receiver = receiver_factory(statuses=[500] * 50)  # every POST refused
    site = site_factory(1, timing=FAST, extra=hook(receiver, WEBHOOK_TRIES="2", BEACON_INTERVAL="0"))
    site.start()
    lease = site.wait_leader(timeout=40)
    agent = site.agents[0]
    wait_until(lambda: (counter(agent, "failed") or 0) >= 1, 20, "the give-up counted")
    elected = docs(receiver, "elected")
    assert len(elected) == 2 and elected[0] == elected[1] and elected[0]["epoch"] == lease.epoch, elected

    def given_up():
        return [r for r in audit_rows(agent) if r[0] == "webhook" and r[1] == "outcome"]

    (row,) = wait_until(given_up, 15, "the give-up's audit row")
    assert row[2] == "error" and f"{elected[0]['id']} (elected) not delivered, 2 tries: HTTP 500" in row[3], (
        row
    )
    assert json.loads((agent.data_dir / "webhook-outbox.json").read_text())["queue"] == []
    assert (counter(agent, "sent"), counter(agent, "dropped")) == (0, 0)
