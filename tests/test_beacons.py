"""The beacon core (docs/design.md §13), pure: datagrams in, verdicts out, on a
fake clock's numbers. Hostile datagrams (forged, replayed, foreign KMSN,
oversized, nested, truncated) are counted and change nothing."""

import json
import time
from dataclasses import replace

import pytest

from elections.core.beacon_board import PER_SOURCE, BeaconBoard, Standing
from elections.core.beacons import MAX_BYTES, Beacon, parse_beacon
from elections.core.decide import (
    DEFER_LOOK,
    EXPIRED,
    GONE,
    SILENT,
    Observation,
    Timing,
    Verdict,
    decide,
    evidence_subject,
)
from elections.core.lease import LeaseRead, LeaseRecord, sign
from elections.core.lease_memory import Memory, track
from elections.core.liveness import CONNECTED, ENDED, FRESH, REFUSED, UNREACHABLE, Liveness
from elections.core.untrusted import Untrusted

KEY = "pool-key-0123456789abcdef"
KMSN = "9999-9999-99-99"
BOOT = "0123456789abcdef"
T = Timing(ttl=10, renew=3, poll=2, deadline=7)


def beacon(node="S001", role="leader", epoch=7, renew_seq=4, seq=1, boot=BOOT, kmsn=KMSN):
    return Beacon(kmsn, node, "10.0.0.1", 9530, role, epoch, renew_seq, boot, seq)


def raw(**kw):
    return beacon(**kw).encode(KEY)


def board(node="S002"):
    return BeaconBoard(KMSN, KEY, node)


FOLLOWER = Standing("S002", seen_key=("S001", 7, 4), holder_ip="10.0.0.1", max_epoch=7)


def forged_bytes(**change):
    doc = json.loads(raw())
    doc.update(change)
    return json.dumps(doc).encode()


def test_a_beacon_round_trips_signed_and_fits_in_one_datagram():
    data = raw()
    assert len(data) <= MAX_BYTES
    assert parse_beacon(data, KEY, KMSN) == beacon()
    doc = json.loads(data)
    assert set(doc) == {"v", "kmsn", "node", "ip", "port", "role", "epoch", "renew_seq", "boot", "seq", "sig"}
    assert doc["sig"] == sign(doc, KEY)


HOSTILE = [
    ("a bad signature", forged_bytes(epoch=99), "forged"),
    (
        "no signature",
        json.dumps({k: v for k, v in json.loads(raw()).items() if k != "sig"}).encode(),
        "unsigned",
    ),
    ("signed with another key", beacon().encode("another-key-0123456789"), "forged"),
    ("another KMSN", raw(kmsn="1111-1111-11-11"), "wrong_kmsn"),
    ("more than 1,200 bytes", raw()[:-1] + b"," + b'"x":"' + b"a" * 1200 + b'"}', "too_large"),
    ("nested arrays", b"[" * 600 + b"]" * 600, "too_deep"),
    ("a nested field", forged_bytes(node={"a": {"b": 1}}), "too_deep"),
    ("truncated", raw()[:57], "not_json"),
    ("not UTF-8", b'{"v": "\xff"}', "not_utf8"),
    ("a list", b"[1, 2]", "not_object"),
    ("a bool as an epoch", forged_bytes(epoch=True), "not_object"),
    ("a negative seq", forged_bytes(seq=-1), "not_object"),
    ("an epoch with no room for the next", raw(epoch=2**63 - 1), "not_object"),  # validly signed
    ("an unknown role", forged_bytes(role="king"), "not_object"),
    ("a bad boot", forged_bytes(boot="xyz"), "not_object"),
    ("empty", b"", "not_json"),
]


@pytest.mark.parametrize("what, data, cause", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_datagram_is_refused_with_its_cause(what, data, cause):
    with pytest.raises(Untrusted) as exc:
        parse_beacon(data, KEY, KMSN)
    assert exc.value.cause == cause


@pytest.mark.parametrize("what, data, cause", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_datagram_is_counted_and_changes_nothing(what, data, cause):
    b = board()
    assert b.receive(data, "10.0.0.9", 100.0, FOLLOWER) is None
    assert b.members == {} and b.accepted == 0
    assert b.refusals.counts == {cause: 1}
    assert b.refusals.recent[("beacon from 10.0.0.9", cause)].count == 1


def test_a_replayed_datagram_is_counted_and_dropped_and_an_older_seq_too():
    b = board()
    b.receive(raw(seq=5), "10.0.0.1", 100.0, FOLLOWER)
    for seq in (5, 4, 1):
        assert b.receive(raw(seq=seq), "10.0.0.1", 100.1, FOLLOWER) is None
    assert b.refusals.counts == {"replayed": 3}
    assert b.members["S001"].received == 1 and b.members["S001"].last_at == 100.0


def test_a_new_boot_starts_its_own_sequence_and_old_boots_stay_replays():
    b = board()
    b.receive(raw(seq=900), "10.0.0.1", 100.0, FOLLOWER)
    b.receive(raw(seq=1, boot="fedcba9876543210"), "10.0.0.1", 101.0, FOLLOWER)
    assert b.members["S001"].boot == "fedcba9876543210" and b.accepted == 2
    b.receive(raw(seq=900), "10.0.0.1", 101.1, FOLLOWER)
    assert b.refusals.counts == {"replayed": 1}


def test_its_own_broadcast_coming_back_is_skipped_silently():
    b = board("S001")
    assert b.receive(raw(), "10.0.0.1", 100.0, FOLLOWER) is None
    assert b.members == {} and b.refusals.counts == {}


def test_arrival_statistics_count_loss_from_seq_gaps_and_age_on_the_receivers_clock():
    b = board()
    now = 100.0
    for seq in range(1, 101):
        if seq % 10 in (3, 7, 9):  # 30 % lost
            continue
        now += 0.2 + (0.03 if seq % 2 else -0.03)
        b.receive(raw(seq=seq), "10.0.0.1", now, FOLLOWER)
    stats = b.members["S001"]
    assert stats.received == 70
    assert stats.loss == pytest.approx(1 - 70 / 100)
    doc = stats.to_doc(now + 1.5)
    assert doc["age_s"] == 1.5 and doc["source"] == "10.0.0.1" and doc["loss"] == pytest.approx(0.3)
    assert 0.01 < stats.jitter < 0.1 and 0.15 < stats.gap < 0.25  # arrivals 0.17 s and 0.23 s apart


def test_a_flood_from_one_address_is_dropped_before_parsing_and_costs_little():
    b = board()
    good = raw(seq=1)
    junk = forged_bytes(epoch=99)
    started = time.process_time()
    for i in range(10_000):
        b.receive(junk, "10.0.0.66", 100.0 + i / 10_000, FOLLOWER)  # 10,000 in one second
    cost = time.process_time() - started
    assert b.refusals.counts["forged"] <= 2 * PER_SOURCE
    assert b.refusals.counts["too_many"] >= 10_000 - 2 * PER_SOURCE
    assert cost < 1.0, f"10,000 datagrams cost {cost:.2f} s of CPU"
    # The members' own datagrams still get through.
    b.receive(good, "10.0.0.1", 101.0, FOLLOWER)
    assert b.members["S001"].received == 1 and b.accepted == 1


def test_a_leader_that_hears_a_higher_epoch_reads_the_store_once_per_beacon_key():
    b = board()
    me = Standing("S002", leader_epoch=7, seen_key=("S002", 7, 9), renew_seq=9)
    r = b.receive(raw(node="S003", epoch=8, seq=1), "10.0.0.3", 100.0, me)
    assert r is not None and "epoch 8 > my 7" in r.why and not r.security
    assert b.receive(raw(node="S003", epoch=8, seq=2), "10.0.0.3", 100.2, me) is None
    assert b.receive(raw(node="S003", epoch=6, seq=3), "10.0.0.3", 100.4, me) is None  # lower: nothing


def test_a_follower_reads_the_lease_on_resign_and_on_another_holder_or_epoch_never_on_a_renewal():
    b = board()
    assert b.receive(raw(renew_seq=4, seq=1), "10.0.0.1", 100.0, FOLLOWER) is None  # what it last read
    # A renewal of the lease it read: the share would tell it nothing new (issue 22: a quiet pool).
    assert b.receive(raw(renew_seq=5, seq=2), "10.0.0.1", 100.2, FOLLOWER) is None
    r = b.receive(raw(renew_seq=3, seq=3), "10.0.0.1", 100.25, FOLLOWER)  # older than what it read: look
    assert r is not None and "seq 3: the lease changed" in r.why
    r = b.receive(raw(node="S003", epoch=8, renew_seq=0, seq=1), "10.0.0.3", 100.3, FOLLOWER)
    assert r is not None and "S003 beacons epoch 8" in r.why
    r = b.receive(raw(role="resign", seq=4), "10.0.0.1", 100.3, FOLLOWER)
    assert r is not None and "resigns epoch 7" in r.why
    assert b.receive(raw(role="resign", seq=5), "10.0.0.1", 100.31, FOLLOWER) is None  # the copies: once


def test_two_leaders_of_one_epoch_are_a_security_event():
    b = board()
    b.receive(raw(node="S001", epoch=7, seq=1), "10.0.0.1", 100.0, FOLLOWER)
    r = b.receive(raw(node="S003", epoch=7, seq=1), "10.0.0.3", 100.1, FOLLOWER)
    assert r is not None and r.security and "S003 and S001" in r.why
    assert b.refusals.counts == {"split_brain": 1}
    me = Standing("S002", leader_epoch=9, seen_key=("S002", 9, 1))
    r = board().receive(raw(node="S004", epoch=9, seq=1), "10.0.0.4", 100.0, me)
    assert r is not None and r.security and "my own epoch 9" in r.why


# -- positive evidence of death --------------------------------------------------


def heard(b, now, node="S001", epoch=7, seq=1):
    b.receive(raw(node=node, epoch=epoch, seq=seq), "10.0.0.1", now, FOLLOWER)


def watching(state, at):
    live = Liveness(interval=0.2)
    live.watch("S001", ("10.0.0.1", 9532), 99.0)
    live.saw(state, at)
    return live


@pytest.mark.parametrize("state", [ENDED, REFUSED])
def test_the_hosts_answer_and_two_silent_intervals_are_evidence(state):
    b = board()
    heard(b, 100.0)
    live = watching(state, 100.05)
    assert live.gone(b, "S001", 7, 100.3) is None  # 0.3 s of silence < 2 x 0.2 s
    why = live.gone(b, "S001", 7, 100.41)
    assert why is not None and "S001's agent is gone" in why


@pytest.mark.parametrize("state", [CONNECTED, UNREACHABLE])
def test_silence_without_an_answer_of_the_host_is_no_evidence(state):
    b = board()
    heard(b, 100.0)
    assert watching(state, 100.05).gone(b, "S001", 7, 130.0) is None


def test_an_answer_while_the_leader_still_beacons_is_no_evidence():
    """Injected resets: the live leader's signed beacons keep coming."""
    b = board()
    live = watching(ENDED, 100.0)
    for i in range(20):
        heard(b, 100.0 + i * 0.2, seq=i + 1)
        live.saw(REFUSED, 100.0 + i * 0.2)
        assert live.gone(b, "S001", 7, 100.0 + i * 0.2 + 0.1) is None


def test_no_evidence_without_leader_beacons_of_that_epoch_or_with_an_old_answer():
    b = board()
    assert watching(REFUSED, 100.0).gone(b, "S001", 7, 101.0) is None  # it never beaconed: maybe it cannot
    heard(b, 100.0, epoch=6)
    assert watching(REFUSED, 100.0).gone(b, "S001", 7, 101.0) is None  # beacons of another epoch
    heard(b, 100.0, epoch=7, seq=2)
    assert watching(REFUSED, 100.0).gone(b, "S001", 7, 100.0 + FRESH + 0.1) is None  # a stale answer
    assert watching(REFUSED, 100.0).gone(b, "S002", 7, 101.0) is None  # not the member watched


def lease(node="S001", epoch=7, seq=4, ttl=10):
    r = LeaseRecord(kmsn=KMSN, station=node, ip="10.0.0.1", port=9530, pid=1, epoch=epoch,
                    lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=ttl)  # fmt: skip
    return LeaseRead("valid", record=r, detail=r.describe(), revision=f"rev-{r.key}")


def test_decide_contends_before_the_ttl_on_evidence_about_the_lease_it_reads():
    mem = track(Memory(node="S002"), lease(), 100.0, T.ttl)
    obs = Observation(lease(), priority=50, gone=("S001", 7, "S001's agent is gone: ..."))
    d = decide(mem, obs, 101.0, T)
    assert (d.verdict, d.cause, d.gap, d.delay) == (Verdict.CONTEND, GONE, 1.0, 0.25)
    assert d.reason == "S001's agent is gone: ..."


@pytest.mark.parametrize(
    "what, obs",
    [
        ("no evidence", Observation(lease())),
        ("evidence about an older epoch", Observation(lease(), gone=("S001", 6, "gone"))),
        ("evidence about another node", Observation(lease(), gone=("S003", 7, "gone"))),
    ],
)
def test_decide_follows_a_live_lease_without_matching_evidence(what, obs):
    mem = track(Memory(node="S002"), lease(), 100.0, T.ttl)
    assert decide(mem, obs, 101.0, T).verdict is Verdict.FOLLOW


def test_evidence_decides_on_an_older_signed_copy_of_the_very_lease_it_is_about():
    """Issue 28: two old signed copies swapped in after kill -9 made the pool wait
    out the TTL. A record older than the newest seen for its (node, epoch) is no
    evidence of life, but it is the lease in place naming the holder judged: the
    evidence is about that holder, and decides."""
    mem = track(Memory(node="S002"), lease(seq=4), 100.0, T.ttl)
    read = lease(seq=2)
    mem = track(mem, read, 100.5, T.ttl)
    assert evidence_subject(mem, read) == ("S001", 7)
    d = decide(mem, Observation(read, priority=50, gone=("S001", 7, "S001's agent is gone")), 101.0, T)
    assert (d.verdict, d.cause) == (Verdict.CONTEND, GONE)


@pytest.mark.parametrize(
    "what, read, deferred",
    [
        ("a damaged lease file", LeaseRead("corrupt", detail="lease file is empty", revision="x"), "corrupt"),
        ("a forged lease file", LeaseRead("forged", detail="bad signature", revision="y"), "forged"),
        ("no lease file (another's claim has it moved aside)", LeaseRead("missing", detail="no lease file"),
         "missing"),
        ("a signed lease of an epoch below what is known", lease(epoch=6, seq=9), "stale"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("cause", [GONE, SILENT])
def test_an_early_takeover_waits_for_a_valid_read_of_the_holder_it_was_judged_on(what, read, deferred, cause):
    """Issue 22: a member read the lease while another member's claim had it moved aside, and
    the evidence about the last holder seen made it contend beside that claim. An early
    takeover needs this cycle's read to name the holder and epoch judged; anything else
    defers it to a later look (soon), and the TTL of the last valid lease runs on."""
    mem = track(track(Memory(node="S002"), lease(seq=4), 100.0, T.ttl), read, 100.5, T.ttl)
    field = "gone" if cause == GONE else "silent"
    evidence = {field: ("S001", 7, "S001 silent for 1.90 s")}
    d = decide(mem, Observation(read, priority=50, **evidence), 101.0, T)
    assert (d.verdict, d.deferred) == (Verdict.WAIT, deferred), (what, d)
    assert "early takeover of S001 epoch 7 deferred, no evidence" in d.reason and d.wake_in == DEFER_LOOK
    d = decide(mem, Observation(read, priority=50, **evidence), 100.0 + T.ttl, T)
    assert (d.verdict, d.cause) == (Verdict.CONTEND, EXPIRED), what  # the TTL path is intact
    valid = lease(seq=4)
    d = decide(track(mem, valid, 101.2, T.ttl), Observation(valid, priority=50, **evidence), 101.2, T)
    assert (d.verdict, d.cause, d.deferred) == (Verdict.CONTEND, cause, None), what


def test_evidence_about_the_holder_a_fresh_record_no_longer_names_or_that_released_is_none():
    mem = track(Memory(node="S002"), lease(seq=4), 100.0, T.ttl)
    newer = lease("S003", epoch=8, seq=1)
    mem2 = track(mem, newer, 100.5, T.ttl)
    assert evidence_subject(mem2, newer) == ("S003", 8)
    assert decide(mem2, Observation(newer, gone=("S001", 7, "gone")), 101.0, T).verdict is Verdict.FOLLOW
    released = lease(ttl=0)
    mem3 = track(mem, released, 100.5, T.ttl)
    assert evidence_subject(mem3, released) is None
    assert evidence_subject(mem3, LeaseRead("missing", detail="gone")) is None


def test_evidence_never_lets_an_ineligible_or_paused_member_contend():
    mem = track(Memory(node="S002"), lease(), 100.0, T.ttl)
    gone = ("S001", 7, "gone")
    assert decide(mem, Observation(lease(), eligible=False, gone=gone), 101.0, T).verdict is Verdict.IDLE
    assert decide(mem, Observation(lease(), paused=True, gone=gone), 101.0, T).verdict is Verdict.IDLE


def test_a_leader_ignores_evidence_and_steps_down_only_on_what_the_store_says():
    mem = track(Memory(node="S002"), lease("S002", 7), 100.0, T.ttl)
    mem = replace(mem, leader_epoch=7, renewed_at=100.0)
    assert decide(mem, Observation(lease("S002", 7), gone=("S002", 7, "x")), 101.0, T).verdict is Verdict.HOLD
    assert decide(mem, Observation(lease("S003", 8)), 101.0, T).verdict is Verdict.STEP_DOWN
