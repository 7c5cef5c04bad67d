"""The pool's policy for one elector (`PoolPolicy.facts()`) and the fold of
command events it reads (`PoolCommands`), in process on a fake clock."""

from __future__ import annotations

import itertools
import os
import random
from dataclasses import replace

import pytest

from elections.core.commands import PoolCommands, order_key
from elections.ports.local.localstate import (
    MAX_LOCAL_FILE,
    RELAY_HEALTH_NAME,
    RELAY_NAME,
    LocalState,
    RelayStatus,
)
from elections.ports.local.pool_view import MemberView, PoolView
from elections.runtime.policy import RELAY_GRACE, PoolFacts, PoolPolicy
from stkhost.clock import FakeClock

_seq = itertools.count(1)


def command(kind, target=None, node="S009", clock=1, seq=None, at="2026-06-15T12:00:00+00:00", **extra):
    """A command event as the steering service writes it."""
    return {"node": node, "seq": next(_seq) if seq is None else seq, "kind": f"{kind}_requested",
            "epoch": extra.pop("epoch", 1), "at": at, "reason": "test", "target": target,
            "actor": "admin", "clock": clock, **extra}  # fmt: skip


def members(**spec):
    """members(S002=(True, 50), ...): eligibility and priority of each."""
    return {
        n: MemberView(eligible=ok, priority=p, reasons=() if ok else ("drained",))
        for n, (ok, p) in spec.items()
    }


POOL = members(S001=(True, 50), S002=(True, 50), S003=(True, 90), S004=(False, 100))


class Arrange:
    """One agent's policy with everything it reads in reach of the test."""

    def __init__(self, tmp_path, node="S001", priority=50, health="ok", relay_attests=True, view=None):
        self.clock = FakeClock()
        self.commands = PoolCommands()
        self.local = LocalState(tmp_path)
        self.view = PoolView(kmsn="9999-9999-99-99", node=node, members=dict(POOL if view is None else view))
        self.leader_since: float | None = None
        self.health = health
        self.policy = PoolPolicy(
            node, priority, self.commands, lambda: self.view, lambda: self.leader_since, self.local,
            self.clock.monotonic, health=lambda: self.health, relay_attests=relay_attests,
        )  # fmt: skip

    def leads_for(self, seconds):
        self.leader_since = self.clock.monotonic() - seconds

    def relay_says(self, age, listening=True):
        """relay.json as the relay writes it, `age` seconds ago on this clock."""
        updated = self.clock.monotonic() - age
        self.local.write_relay(RelayStatus(pid=os.getpid(), epoch=1, listening=listening, updated=updated))

    def relay_json_over_the_limit(self):
        """relay.json grown past the local files' read limit (it reads as {})."""
        (self.local.dir / RELAY_NAME).write_text(
            '{"snapshot": {"clients": ["' + "x" * MAX_LOCAL_FILE + '"]}}'
        )

    def damage_health(self):
        (self.local.dir / RELAY_HEALTH_NAME).write_text('{"pid": 1, "listen')


# -- eligibility ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case, arrange, eligible, why",
    [
        ("a member nobody drained is eligible", lambda a: None, True, ""),
        ("a drain of this node makes it ineligible", lambda a: a.commands.apply([command("drain", "S001")]),
         False, "drained"),
        ("a drain of another node leaves it eligible", lambda a: a.commands.apply([command("drain", "S002")]),
         True, ""),
        ("an undrain after the drain makes it eligible again",
         lambda a: a.commands.apply([command("drain", "S001", clock=1), command("undrain", "S001", clock=2)]),
         True, ""),
        ("a failing health check makes it ineligible in the check's own words",
         lambda a: setattr(a, "health", "health: GET /ping 503"), False, "health: GET /ping 503"),
        ("a follower is not judged on a relay it does not run", lambda a: None, True, ""),
        ("a new leader's relay has a grace to come up, with no relay.json yet",
         lambda a: a.leads_for(RELAY_GRACE - 0.25), True, ""),
        ("a leader past the grace with no relay.json is ineligible",
         lambda a: a.leads_for(RELAY_GRACE + 0.25), False, "relay not running"),
        ("a leader whose relay.json is stale is ineligible",
         lambda a: (a.leads_for(10), a.relay_says(age=4.0)), False, "relay status 4.0 s old > 3 s"),
        ("a leader whose relay says it does not listen is ineligible",
         lambda a: (a.leads_for(10), a.relay_says(age=0.5, listening=False)), False, "relay not running"),
        ("a leader whose relay.json is fresh is eligible",
         lambda a: (a.leads_for(10), a.relay_says(age=0.5)), True, ""),
        # issue 40: the relay's health is its small record, not its snapshot
        ("a leader whose relay.json is past the read limit is eligible while its health record is fresh",
         lambda a: (a.leads_for(10), a.relay_says(age=0.5), a.relay_json_over_the_limit()), True, ""),
        ("a health record that cannot be read is looked at again, then relay.json's own fields",
         lambda a: (a.leads_for(10), a.relay_says(age=0.5), a.damage_health()), True, ""),
        ("a stale relay.json within the grace is still ok",
         lambda a: (a.leads_for(RELAY_GRACE - 0.25), a.relay_says(age=60.0)), True, ""),
        # CI: SIGTERM just after an election; the supervisor released epoch 1 and the
        # worker, still running, took epoch 2 from its own release (then never renewed it).
        ("an agent that is stopping takes no lease back", lambda a: a.local.mark_stopping(),
         False, "this agent is stopping"),
    ],
)  # fmt: skip
def test_eligibility_names_the_failing_condition(tmp_path, case, arrange, eligible, why):
    a = Arrange(tmp_path)
    arrange(a)
    facts = a.policy.facts(held_epoch=1 if a.leader_since is not None else None, lease_epoch=1)
    assert (facts.eligible, facts.ineligible_why) == (eligible, why)


def test_priority_0_is_never_eligible(tmp_path):
    facts = Arrange(tmp_path, priority=0).policy.facts(None, 1)
    assert (facts.eligible, facts.ineligible_why, facts.priority) == (False, "priority 0 (never leader)", 0)


def test_a_relay_that_does_not_attest_leaves_a_leader_eligible_without_a_relay(tmp_path):
    a = Arrange(tmp_path, relay_attests=False)
    a.leads_for(60)
    assert a.policy.facts(1, 1).eligible


def test_a_relay_grown_stale_while_leading_turns_the_leader_ineligible(tmp_path):
    a = Arrange(tmp_path)
    a.leads_for(10)
    a.relay_says(age=0.0)
    assert a.policy.facts(1, 1).eligible
    a.clock.advance(3.25)  # the relay stopped writing
    assert a.policy.facts(1, 1).ineligible_why == "relay status 3.2 s old > 3 s"


# -- planned handoffs, successor, deference ---------------------------------------------------


@pytest.mark.parametrize(
    "case, promote, held, expected",
    [
        ("a promote of the held epoch naming an eligible other hands off to it",
         command("promote", "S002", epoch=4, expected_epoch=4), 4, ("S002", "promote of S002 requested")),
        ("a promote naming a member that fell ineligible since is not obeyed blindly",
         command("promote", "S004", epoch=4, expected_epoch=4), 4, None),
        ("a promote naming no member of the pool view is not obeyed",
         command("promote", "S042", epoch=4, expected_epoch=4), 4, None),
        ("a promote naming this very node is no handoff", command("promote", "S001", epoch=4), 4, None),
        ("a promote of an earlier epoch does not move a later leader",
         command("promote", "S002", epoch=3, expected_epoch=3), 4, None),
        ("a follower has no handoff to make", command("promote", "S002", epoch=4), None, None),
    ],
)  # fmt: skip
def test_a_planned_handoff_follows_a_promote_of_the_held_epoch(tmp_path, case, promote, held, expected):
    a = Arrange(tmp_path)
    a.commands.apply([promote])
    assert a.policy.facts(held_epoch=held, lease_epoch=4).planned_handoff == expected


def test_the_newest_promote_of_the_epoch_wins(tmp_path):
    a = Arrange(tmp_path)
    a.commands.apply(
        [command("promote", "S003", clock=5, epoch=4), command("promote", "S002", clock=2, epoch=4)]
    )
    assert a.policy.facts(4, 4).planned_handoff == ("S003", "promote of S003 requested")


@pytest.mark.parametrize(
    "case, view, expected",
    [
        ("the highest priority eligible member succeeds", POOL, "S003"),
        ("a tie in priority goes to the lowest node id",
         members(S001=(True, 50), S007=(True, 80), S005=(True, 80), S002=(True, 10)), "S005"),
        ("an ineligible member never succeeds, whatever its priority",
         members(S001=(True, 50), S002=(False, 100), S003=(True, 1)), "S003"),
        ("the leader itself is never its own successor", members(S001=(True, 100), S002=(True, 1)), "S002"),
        ("no eligible other member: no successor", members(S001=(True, 100), S002=(False, 90)), None),
    ],
)  # fmt: skip
def test_the_successor_is_the_highest_priority_then_the_lowest_node_id(tmp_path, case, view, expected):
    a = Arrange(tmp_path, view=view)
    assert a.policy.facts(held_epoch=2, lease_epoch=2).successor == expected


def test_a_follower_gets_no_successor(tmp_path):
    assert Arrange(tmp_path).policy.facts(held_epoch=None, lease_epoch=2).successor is None


@pytest.mark.parametrize(
    "case, node, promote, lease_epoch, expected",
    [
        ("a promote of the lease's epoch naming another makes this node defer", "S001",
         command("promote", "S002", epoch=4), 4, True),
        ("the promoted node itself does not defer", "S002", command("promote", "S002", epoch=4), 4, False),
        ("a promote of another epoch is no reason to defer", "S001", command("promote", "S002", epoch=3), 4,
         False),
        ("no lease read: nothing to defer to", "S001", command("promote", "S002", epoch=4), None, False),
    ],
)  # fmt: skip
def test_a_pending_promote_elsewhere_makes_the_others_defer(
    tmp_path, case, node, promote, lease_epoch, expected
):
    a = Arrange(tmp_path, node=node)
    a.commands.apply([promote])
    assert a.policy.facts(held_epoch=None, lease_epoch=lease_epoch).promote_elsewhere is expected


def test_the_facts_carry_pause_and_priority(tmp_path):
    a = Arrange(tmp_path, priority=70)
    assert a.policy.facts(None, 1) == PoolFacts(priority=70, rival_priority=90)  # S003, eligible, 90
    a.commands.apply([command("pause")])
    assert a.policy.facts(None, 1) == PoolFacts(priority=70, paused=True, rival_priority=90)


# -- the Lamport order of commands ---------------------------------------------------------------


def state(c: PoolCommands):
    return dict(c.drained), c.paused, [order_key(e) for e in c.promotes], c.clock, c.promote_at(4)


EVENTS = [
    command("drain", "S002", node="S001", clock=1, seq=10),
    command("undrain", "S002", node="S003", clock=3, seq=2),
    command("drain", "S002", node="S002", clock=3, seq=7),  # concurrent with the undrain: S003 > S002
    command("pause", node="S002", clock=2, seq=8),
    command("resume", node="S001", clock=2, seq=11),  # concurrent with the pause: S002 > S001
    command("promote", "S003", node="S001", clock=4, seq=12, epoch=4),
    command("promote", "S001", node="S003", clock=4, seq=3, epoch=4),  # same clock: node S003 sorts last
    {"node": "S001", "seq": 13, "kind": "elected", "epoch": 4, "at": "2020-01-01T00:00:00+00:00"},
]


def test_the_same_events_in_any_order_or_batching_give_the_same_state():
    first = PoolCommands()
    first.apply(EVENTS)
    expected = state(first)
    assert expected == ({"S002": False}, True, sorted(order_key(e) for e in EVENTS[5:7]), 4, "S001")
    rng = random.Random(11)
    for order in itertools.islice(itertools.permutations(EVENTS), 0, None, 7):
        c = PoolCommands()
        cuts = sorted(rng.sample(range(1, len(order)), rng.randint(0, 3)))
        for start, end in itertools.pairwise([0, *cuts, len(order)]):
            c.apply(list(order[start:end]))
        assert state(c) == expected, order


def test_applying_the_same_events_again_changes_nothing():
    """An event file replaced on the share is read again from the start."""
    once, twice = PoolCommands(), PoolCommands()
    once.apply(EVENTS)
    twice.apply(EVENTS)
    twice.apply(EVENTS[4:])
    assert state(twice) == state(once)
    assert len(twice.promotes) == 2


@pytest.mark.parametrize(
    "case, earlier, later",
    [
        ("a later clock wins over a lower node id", command("drain", "S002", node="S009", clock=5),
         command("undrain", "S002", node="S001", clock=6)),
        ("a later clock wins over a higher node id", command("undrain", "S002", node="S001", clock=5),
         command("drain", "S002", node="S009", clock=6)),
        ("a later clock wins over a higher seq", command("drain", "S002", node="S001", clock=5, seq=900),
         command("undrain", "S002", node="S001", clock=6, seq=1)),
        ("a later clock wins over an earlier wall clock",
         command("drain", "S002", clock=5, at="2030-01-01T00:00:00+00:00"),
         command("undrain", "S002", clock=6, at="2001-01-01T00:00:00+00:00")),
        ("concurrent commands order by node id", command("undrain", "S002", node="S001", clock=5, seq=900),
         command("drain", "S002", node="S003", clock=5, seq=1)),
        ("concurrent commands of one node order by its seq",
         command("drain", "S002", node="S003", clock=5, seq=1),
         command("undrain", "S002", node="S003", clock=5, seq=2)),
        ("a command without a clock counts as clock 0",
         {k: v for k, v in command("undrain", "S002", node="S009").items() if k != "clock"},
         command("drain", "S002", node="S001", clock=1)),
    ],
)  # fmt: skip
def test_the_last_command_in_lamport_order_wins_whatever_the_reading_order(case, earlier, later):
    for events in ([earlier, later], [later, earlier]):
        c = PoolCommands()
        c.apply(events)
        assert c.drained == {"S002": later["kind"] == "drain_requested"}, events
        assert c.clock == max(order_key(earlier)[0], order_key(later)[0])


def test_the_wall_clock_at_of_a_command_is_never_read():
    drain = command("drain", "S002", node="S001", clock=3, at="2026-06-15T12:00:00+00:00")
    undrain = command("undrain", "S002", node="S002", clock=3, at="2026-06-15T12:00:01+00:00")
    results = set()
    for at_drain, at_undrain in [("1999-01-01", "2099-01-01"), ("2099-01-01", "1999-01-01"), ("x", None)]:
        c = PoolCommands()
        c.apply([dict(drain, at=at_drain), dict(undrain, at=at_undrain)])
        results.add(c.drained["S002"])
    assert results == {False}  # S002 > S001 at clock 3: the undrain, however the wall clocks read


def test_the_rival_is_the_highest_priority_of_the_other_eligible_members_but_the_holder(tmp_path):
    """Issue 22: in a pool of equal priorities nobody waits for a rival (0.25 s off every
    failover); a higher rival still goes first; the holder being replaced is no rival."""
    a = Arrange(tmp_path)  # S002 50, S003 90 (eligible), S004 100 (not)
    assert a.policy.facts(None, 1).rival_priority == 90
    a.view = replace(a.view, lease={"node": "S003", "epoch": 1})  # S003 holds the lease: it is no rival
    assert a.policy.facts(None, 1).rival_priority == 50
    a.view = replace(a.view, members=members(S001=(True, 50), S002=(False, 80)), lease=None)
    assert a.policy.facts(None, 1).rival_priority == 0  # the only other one is not eligible
    a.view = replace(a.view, members=members(S001=(True, 50)))
    assert a.policy.facts(None, 1).rival_priority == 100  # nobody else known yet: as before
