# ruff: noqa: F811 (the fixtures of test_executor_aws, imported)
"""The ownership watch, in process, against the moto server: a secondary IP moved
by hand to the follower's ENI is put right by the leader (its election action,
fenced on its epoch, recorded as a repair), the follower lets go once the
leader holds it too, the hold keeps a fight to one action, pause stops it, a
stale epoch is fenced, and a malformed heartbeat report is refused whole."""

from test_executor_aws import REGION, SEIZED, aws_env, moto, vpc  # noqa: F401

from elections.core.actions import action_config
from elections.core.evidence import Refusals
from elections.core.ownership import CONFLICT, DRIFT, OK
from elections.core.repair import RepairStanding
from elections.executors import APPLIED, FENCED, ActionFence, AwsExecutor
from elections.runtime.ownership import OwnershipWatch


class Sink:
    def __init__(self):
        self.rows = []

    def record(self, kind, epoch, reason, **extra):
        self.rows.append((kind, epoch, extra.get("repair"), extra.get("verb")))


class Node:
    """One agent's watch: its config, executor, gate (what it holds) and standing."""

    def __init__(self, name, eni, moto, peers, **kw):
        self.name, self.eni = name, eni
        cfg, problems = action_config(
            {"AWS_ENI_ID": eni, "AWS_PRIVATE_IP": SEIZED, "AWS_REGION": REGION, "AWS_ENDPOINT_URL": moto}
        )
        assert problems == []
        self.held = None  # what its gate says it holds
        self.me = RepairStanding(name, None, None, None)  # what its watch believes
        self.sink = Sink()
        self.now = [100.0]
        self.refusals = Refusals()
        self.watch = OwnershipWatch(
            name, cfg, [AwsExecutor()], ActionFence(lambda: self.held), self.sink, 1.0, 10.0, lambda: self.me,
            lambda: {n: {"holds": p.watch.reports()} for n, p in peers.items() if n != name} | self.junk,
            lambda: self.now[0], self.refusals, **kw,
        )  # fmt: skip
        self.junk = {}

    def lead(self, epoch):
        self.held = epoch
        self.me = RepairStanding(self.name, epoch, self.name, epoch)

    def follow(self, leader, epoch, paused=False):
        self.held = None
        self.me = RepairStanding(self.name, None, leader, epoch, paused)

    def look(self):
        out = self.watch.run_once()
        return out, {e.address: e for e in self.watch._entries}[SEIZED]


def eni_ips(ec2, eni):
    [nic] = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"]
    return {i["PrivateIpAddress"] for i in nic["PrivateIpAddresses"] if not i.get("Primary")}


def move_by_hand(ec2, src, dst):
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=src, PrivateIpAddresses=[SEIZED])
    ec2.assign_private_ip_addresses(NetworkInterfaceId=dst, PrivateIpAddresses=[SEIZED])


def site(vpc, moto, **kw):
    ec2, eni_a, eni_b = vpc
    peers = {}
    a, b = Node("a", eni_a, moto, peers, **kw), Node("b", eni_b, moto, peers, **kw)
    peers.update(a=a, b=b)
    a.lead(5)
    b.follow("a", 5)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_a, PrivateIpAddresses=[SEIZED])
    return ec2, a, b


def test_a_moved_secondary_ip_is_put_right_by_the_leader_then_let_go_by_the_follower(vpc, moto):
    ec2, a, b = site(vpc, moto)
    b.look()
    assert a.look() == ([], a.look()[1]) and a.look()[1].verdict == OK

    move_by_hand(ec2, a.eni, b.eni)
    b.look()  # b's heartbeat now says it holds the address
    [out], entry = a.look()
    assert entry.verdict == DRIFT and entry.holders == ("b",)
    assert out.status == APPLIED and out.action.verb == "assign_secondary_ip" and out.action.epoch == 5
    assert out.action.description.startswith("Put right (drift, it should be on this leader): Seize")
    assert a.sink.rows == [("action_applied", 5, "drift", "assign_secondary_ip")]
    assert SEIZED in eni_ips(ec2, a.eni)  # moto copies where EC2 moves: b still lists it

    assert a.look()[0] == []  # a conflict now: nothing the leader does (and its hold runs)
    [out], entry = b.look()
    assert entry.verdict == CONFLICT and out.status == APPLIED and out.action.verb == "release_secondary_ip"
    assert b.sink.rows == [("action_applied", 5, "conflict", "release_secondary_ip")]
    assert SEIZED not in eni_ips(ec2, b.eni)
    assert a.look() == ([], a.watch._entries[0]) and a.watch._entries[0].verdict == OK
    assert [r["cause"] for r in a.watch.snapshot()["repairs"]] == ["drift"]


def test_the_hold_keeps_a_fight_over_the_address_to_one_action_per_hold(vpc, moto):
    ec2, a, b = site(vpc, moto)
    b.look()
    move_by_hand(ec2, a.eni, b.eni)
    assert len(a.look()[0]) == 1
    move_by_hand(ec2, a.eni, b.eni)  # someone takes it away again at once
    a.now[0] += 9.9
    out, entry = a.look()
    assert entry.verdict == DRIFT and out == []  # within the 10 s hold
    a.now[0] += 0.2
    assert len(a.look()[0]) == 1
    assert [r[0] for r in a.sink.rows] == ["action_applied", "action_applied"]


def test_nothing_is_done_while_paused_or_with_repair_off(vpc, moto):
    ec2, a, b = site(vpc, moto)
    move_by_hand(ec2, a.eni, b.eni)
    b.look()
    a.me = RepairStanding("a", 5, "a", 5, paused=True)
    out, entry = a.look()
    assert entry.verdict == DRIFT and out == [] and a.sink.rows == []
    a.watch.repair = False  # OWNERSHIP_REPAIR = 0
    a.lead(5)
    out, entry = a.look()
    assert entry.verdict == DRIFT and out == [] and SEIZED not in eni_ips(ec2, a.eni)


def test_a_leader_whose_epoch_went_stale_is_fenced_and_changes_nothing(vpc, moto):
    ec2, a, b = site(vpc, moto)
    move_by_hand(ec2, a.eni, b.eni)
    a.held = None  # its lease lapsed; its watch still believes it leads epoch 5
    b.look()
    [out], entry = a.look()
    assert entry.verdict == DRIFT and out.status == FENCED
    assert a.sink.rows == [("action_fenced", 5, "drift", "assign_secondary_ip")]
    assert SEIZED not in eni_ips(ec2, a.eni)


def test_a_malformed_heartbeat_report_is_refused_counted_and_never_acted_on(vpc, moto):
    _, a, _ = site(vpc, moto)
    a.junk = {"x": {"holds": [{"executor": "aws", "address": SEIZED, "held": "yes"}]}}
    out, entry = a.look()
    assert entry.verdict == OK and out == []
    assert a.refusals.counts == {"bad_field": 1}
    [refusal] = a.refusals.to_doc()["recent"]
    assert refusal["source"] == "members/x.json" and "held is not true" in refusal["detail"]


class ElectedMidLook(AwsExecutor):
    """The provider answers; then, before the watch reads its standing, this agent is elected
    and its election plan takes the address (the look and the first cycle at once, issue 41)."""

    def __init__(self, meanwhile):
        super().__init__()
        self.meanwhile = meanwhile

    def observe(self, args):
        seen = super().observe(args)
        if self.meanwhile is not None:
            self.meanwhile()
            self.meanwhile = None
        return seen


def test_a_look_made_while_this_agent_is_elected_repairs_nothing_and_looks_again(vpc, moto):
    ec2, eni_a, _ = vpc
    a = Node("a", eni_a, moto, {})

    def elected():  # the lease taken, then the election plan's assign (its duty thread, done)
        a.lead(5)
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_a, PrivateIpAddresses=[SEIZED])

    a.watch.executors = [ElectedMidLook(elected)]
    a.watch.found = [(a.watch.executors[0], a.watch.found[0][1])]
    out, entry = a.look()
    assert out == [] and a.sink.rows == []  # the sighting before the election is not a `missing` address
    assert entry.verdict == OK and entry.holders == ("a",)  # looked again once the standing held still
