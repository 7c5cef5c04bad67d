"""The ownership map and the repair rule (pure): table-driven."""

import pytest

from elections.core.ownership import (
    CONFLICT,
    DRIFT,
    MISSING,
    OK,
    ORPHAN,
    UNKNOWN,
    BadReport,
    Entry,
    HoldClaim,
    Sighting,
    ownership_map,
    reports_of,
    verdict,
)
from elections.core.repair import ACQUIRE, RELEASE, Repair, RepairStanding, repairs

VIP = "192.0.2.100"
MAC = {"S001": "02:00:00:00:00:01", "S002": "02:00:00:00:00:02", "S003": "02:00:00:00:00:03"}
STRANGER = "02:00:00:00:00:99"


def report(node, held, nic=None, executor="vip", address=VIP, error=""):
    return HoldClaim(node, executor, address, MAC.get(node, "") if nic is None else nic, held, error)


def seen(held, holders=(), complete=True, me="S001", error=""):
    return Sighting("vip", VIP, MAC[me], held, tuple(holders), complete, error)


@pytest.mark.parametrize(
    "expected, holders, foreign, known, want",
    [
        ("S001", {"S001"}, set(), True, OK),
        ("S001", {"S002"}, set(), True, DRIFT),
        ("S001", set(), {STRANGER}, True, ORPHAN),
        ("S001", {"S001", "S002"}, set(), True, CONFLICT),
        ("S001", {"S001"}, {STRANGER}, True, CONFLICT),
        ("S001", {"S002", "S003"}, set(), True, CONFLICT),
        ("S001", set(), set(), True, MISSING),
        (None, set(), set(), True, OK),  # no leader, nothing held: nothing to say
        (None, {"S002"}, set(), True, DRIFT),  # no leader, yet a member holds it
        ("S001", {"S001"}, set(), False, UNKNOWN),
    ],
)
def test_the_verdict_table(expected, holders, foreign, known, want):
    assert verdict(expected, holders, foreign, known) == want


# (what this agent S001 sees of itself, the members' reports, the expected owner) -> verdict, holders, foreign
CASES = {
    "on the leader": (seen(True, [MAC["S001"]]), [report("S002", False)], OK, ("S001",), ()),
    "moved by hand to a follower, seen by ARP and reported": (
        seen(False, [MAC["S002"]]), [report("S002", True)], DRIFT, ("S002",), ()),
    "on a follower that says so, but this agent's whole-network look (fresher) does not show it": (
        seen(False, []), [report("S002", True)], MISSING, (), ()),
    "on a follower that says so; this agent only saw itself (its probe failed)": (
        seen(False, [], complete=False), [report("S002", True)], DRIFT, ("S002",), ()),
    "on a follower whose NIC is unknown, by its own account": (
        seen(False, []), [report("S002", True, nic="")], DRIFT, ("S002",), ()),
    "on a follower whose heartbeat is behind, but ARP shows its MAC": (
        seen(False, [MAC["S002"]]), [report("S002", False)], DRIFT, ("S002",), ()),
    "on two members": (seen(True, [MAC["S001"], MAC["S002"]]), [report("S002", True)], CONFLICT,
                       ("S001", "S002"), ()),
    "on a host that is no member": (seen(False, [STRANGER]), [report("S002", False)], ORPHAN, (),
                                    (STRANGER,)),
    "on the leader and a stranger": (seen(True, [MAC["S001"], STRANGER]), [], CONFLICT, ("S001",),
                                     (STRANGER,)),
    "nowhere": (seen(False, []), [report("S002", False)], MISSING, (), ()),
    "a NIC two members claim is no evidence for either": (
        seen(False, [MAC["S002"]]), [report("S002", False), report("S003", False, nic=MAC["S002"])], ORPHAN,
        (), (MAC["S002"],)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_map_from_sightings_and_reports(case):
    mine, others, want, holders, foreign = CASES[case]
    reports = {}
    for r in others:
        reports.setdefault(r.node, []).append(r)
    [entry] = ownership_map("S001", "S001", 7, [mine], reports)
    assert (entry.verdict, entry.holders, entry.foreign) == (want, holders, foreign)
    assert entry.expected == "S001" and entry.epoch == 7


def test_a_failed_observation_with_no_report_is_unknown_and_says_why():
    [entry] = ownership_map("S001", "S001", 3, [seen(None, complete=False, error="ip: timed out")], {})
    assert entry.verdict == UNKNOWN
    assert entry.errors == ("S001: ip: timed out",)
    assert "not seen: S001: ip: timed out" in entry.describe()


def test_an_incomplete_sighting_still_counts_what_this_agent_holds():
    mine = seen(True, complete=False, error="arp probe: Operation not permitted")
    [entry] = ownership_map("S001", "S001", 3, [mine], {"S002": [report("S002", False)]})
    assert entry.verdict == OK and entry.errors == ("S001: arp probe: Operation not permitted",)


def test_a_heartbeat_written_before_the_move_does_not_keep_its_member_on_the_map():
    s002 = Sighting("vip", VIP, MAC["S002"], True, (MAC["S002"],), True)
    [entry] = ownership_map("S002", "S001", 7, [s002], {"S001": [report("S001", True)]})
    assert (entry.verdict, entry.holders) == (DRIFT, ("S002",))


def test_this_agents_own_heartbeat_is_ignored_in_favour_of_its_fresh_sighting():
    [entry] = ownership_map("S001", "S001", 3, [seen(True, [MAC["S001"]])], {"S001": [report("S001", False)]})
    assert entry.verdict == OK


def test_addresses_only_others_report_are_listed_too_and_sorted():
    reports = {"S002": [report("S002", True, executor="aws", address="192.0.2.50", nic="eni-0b")]}
    entries = ownership_map("S001", "S001", 3, [seen(True, [MAC["S001"]])], reports)
    assert [(e.executor, e.address, e.verdict) for e in entries] == [("aws", "192.0.2.50", DRIFT),
                                                                     ("vip", VIP, OK)]  # fmt: skip


def test_an_entry_survives_its_file_and_a_damaged_one_reads_as_nothing():
    [entry] = ownership_map("S001", "S001", 3, [seen(False, [STRANGER])], {})
    assert Entry.from_doc(entry.to_doc()) == entry
    for junk in (None, [], {"verdict": "fine"}, {"verdict": "ok", "executor": 3, "address": VIP}):
        assert Entry.from_doc(junk) is None


# -- heartbeat reports: hostile input is refused whole ------------------------------------------


def test_a_heartbeat_report_parses():
    doc = {"holds": [{"executor": "vip", "address": VIP, "nic": MAC["S002"], "held": True}]}
    assert reports_of("S002", doc) == [HoldClaim("S002", "vip", VIP, MAC["S002"], True)]
    assert reports_of("S002", {}) == []


@pytest.mark.parametrize(
    "holds",
    [
        "everything",
        [{"executor": "vip", "address": VIP, "held": True}] * 9,
        ["x"],
        [{"executor": "relay", "address": VIP, "held": True}],
        [{"executor": "vip", "address": "not-an-ip", "held": True}],
        [{"executor": "vip", "address": VIP, "held": "yes"}],
        [{"executor": "vip", "address": VIP, "held": True, "nic": "x" * 300}],
        [{"executor": "vip", "address": VIP, "held": True, "nic": ["a"]}],
        [{"executor": ["vip"], "address": VIP}],
    ],
)
def test_a_malformed_heartbeat_report_is_refused_whole(holds):
    with pytest.raises(BadReport):
        reports_of("S002", {"holds": holds})


# -- repairs ------------------------------------------------------------------------------------

LEADER = RepairStanding("S001", held_epoch=7, leader="S001", lease_epoch=7)
FOLLOWER = RepairStanding("S002", held_epoch=None, leader="S001", lease_epoch=7)


def entry(v, holders=(), expected="S001", epoch=7, foreign=()):
    return Entry("vip", VIP, v, expected, epoch, tuple(holders), tuple(foreign))


def mine(held, me="S001"):
    return [seen(held, me=me)]


@pytest.mark.parametrize(
    "name, e, sighting, me, last, want",
    [
        ("leader takes back a drifted address", entry(DRIFT, ["S002"]), mine(False), LEADER, {}, ACQUIRE),
        ("leader takes back a missing address", entry(MISSING), mine(False), LEADER, {}, ACQUIRE),
        ("leader takes back an orphan", entry(ORPHAN, foreign=[STRANGER]), mine(False), LEADER, {}, ACQUIRE),
        ("leader holding it does nothing", entry(OK, ["S001"]), mine(True), LEADER, {}, None),
        ("leader + stranger: nothing it can do", entry(CONFLICT, ["S001"], foreign=[STRANGER]), mine(True),
         LEADER, {}, None),
        ("leader waits out its hold", entry(DRIFT, ["S002"]), mine(False), LEADER, {("vip", VIP): 95.0},
         None),
        ("after the hold it acts again", entry(DRIFT, ["S002"]), mine(False), LEADER, {("vip", VIP): 80.0},
         ACQUIRE),
        ("leader of another epoch than the map's", entry(DRIFT, ["S002"], epoch=6), mine(False), LEADER, {},
         None),
        ("never act blind", entry(DRIFT, ["S002"]), [seen(None, error="x")], LEADER, {}, None),
        ("paused", entry(DRIFT, ["S002"]), mine(False), RepairStanding("S001", 7, "S001", 7, paused=True), {},
         None),
        ("a duty plan still runs", entry(MISSING), mine(False),
         RepairStanding("S001", 7, "S001", 7, busy=True), {}, None),
        ("follower lets go once the leader holds it", entry(CONFLICT, ["S001", "S002"]), mine(True, "S002"),
         FOLLOWER, {}, RELEASE),
        ("follower keeps it while the leader does not", entry(DRIFT, ["S002"]), mine(True, "S002"), FOLLOWER,
         {}, None),
        ("follower with no live leader keeps it", entry(CONFLICT, ["S001", "S002"], expected=None),
         mine(True, "S002"), RepairStanding("S002", None, None, None), {}, None),
        ("follower not holding it does nothing", entry(OK, ["S001"]), mine(False, "S002"), FOLLOWER, {},
         None),
    ],
)  # fmt: skip
def test_the_repair_rule(name, e, sighting, me, last, want):
    out = repairs([e], sighting, me, last, now=100.0, hold=10.0)
    if want is None:
        assert out == [], name
    else:
        epoch = me.held_epoch if want == ACQUIRE else me.lease_epoch
        assert out == [Repair("vip", VIP, want, epoch, e.verdict)], name


def test_a_flood_of_strangers_never_hides_this_agents_own_holding():
    strangers = [f"02:00:00:00:01:{i:02x}" for i in range(40)]
    [entry] = ownership_map("S001", "S001", 3, [seen(True, [*strangers, MAC["S001"]])], {})
    assert entry.verdict == CONFLICT and entry.holders == ("S001",) and len(entry.foreign) == 15
