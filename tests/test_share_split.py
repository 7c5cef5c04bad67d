"""core.share_split: members of one KMSN on two stores, judged on this agent's clock (pure)."""

from __future__ import annotations

import json

import pytest

from elections.core.beacons import MAX_BYTES, Beacon, parse_beacon
from elections.core.lease import sign
from elections.core.share_split import FOREIGN_LEADER, MEMBER_MISSING, NOT_SAID, SplitWatch

KEY, KMSN = "pool-key-for-the-split-test", "9999-9999-99-99"


def heard(role="follower", epoch=1, age=0.1, store="file:/mnt/w/socket"):
    doc = {"role": role, "epoch": epoch, "age_s": age}
    return {**doc, "store": store} if store else doc


def watch(grace=6.0):
    return SplitWatch("S001", "file:/srv/share/socket", grace)


def test_a_member_missing_from_the_store_is_named_after_the_grace_only():
    w = watch()
    assert w.observe({"S002": heard()}, {"S001"}, ("S001", 1), now=100.0) == []
    assert w.observe({"S002": heard()}, {"S001"}, ("S001", 1), now=105.9) == []
    (f,) = w.observe({"S002": heard()}, {"S001"}, ("S001", 1), now=106.0)
    assert (f.node, f.kind, f.ours, f.theirs) == ("S002", MEMBER_MISSING, "file:/srv/share/socket",
                                                  "file:/mnt/w/socket")  # fmt: skip
    assert "file:/srv/share/socket" in f.detail and "file:/mnt/w/socket" in f.detail


def test_the_condition_must_hold_throughout_the_grace():
    w = watch()
    w.observe({"S002": heard()}, {"S001"}, None, now=0.0)
    w.observe({"S002": heard()}, {"S001", "S002"}, None, now=3.0)  # its file appeared: forgotten
    assert w.observe({"S002": heard()}, {"S001"}, None, now=8.0) == []  # missing again: from 8 s on
    assert w.observe({"S002": heard()}, {"S001"}, None, now=13.9) == []
    assert w.observe({"S002": heard()}, {"S001"}, None, now=14.0)[0].since_s == pytest.approx(6.0)


def test_a_leader_whose_lease_the_store_does_not_have():
    w = watch()
    lead = {"S002": heard("leader", 1)}
    w.observe(lead, {"S001", "S002"}, ("S001", 1), now=0.0)
    (f,) = w.observe(lead, {"S001", "S002"}, ("S001", 1), now=6.0)
    assert f.kind == FOREIGN_LEADER and "S001 epoch 1" in f.detail
    # The lease names it: a plain leader, nothing to say.
    assert w.observe(lead, {"S001", "S002"}, ("S002", 1), now=7.0) == []


def test_silence_itself_and_unreadable_stores_prove_nothing():
    w = watch()
    stale = {"S002": heard(age=6.5)}  # no beacon for longer than the grace: it may just be gone
    w.observe(stale, {"S001"}, None, now=0.0)
    assert w.observe(stale, {"S001"}, None, now=60.0) == []
    w.observe({"S002": heard()}, None, ("S001", 1), now=0.0)  # the store could not be listed
    assert w.observe({"S002": heard()}, None, ("S001", 1), now=60.0) == []
    assert w.observe({"S001": heard()}, set(), None, now=90.0) == []  # our own node


def test_an_unreadable_lease_judges_no_leader():
    w = watch()
    lead = {"S002": heard("leader", 1)}
    for t in (0.0, 3.0, 60.0):  # the share hangs: the lease is not known, so nobody is foreign
        assert w.observe(lead, {"S001", "S002"}, None, now=t, lease_known=False) == []
    w.observe(lead, {"S001", "S002"}, ("S001", 1), now=61.0)
    w.observe(lead, {"S001", "S002"}, None, now=64.0, lease_known=False)  # a bad read mid-way: kept
    assert w.observe(lead, {"S001", "S002"}, ("S001", 1), now=67.0)[0].kind == FOREIGN_LEADER


def test_a_short_pause_or_an_unlisted_store_keeps_the_clock_running():
    w = watch()
    w.observe({"S002": heard()}, {"S001"}, None, now=0.0)
    w.observe({"S002": heard(age=3.0)}, {"S001"}, None, now=3.0)  # a loaded host: beacons late
    w.observe({"S002": heard()}, None, None, now=4.0)  # the store not listed this time
    (f,) = w.observe({"S002": heard()}, {"S001"}, None, now=6.0)
    assert f.kind == MEMBER_MISSING and f.since_s == pytest.approx(6.0)
    assert w.observe({"S002": heard(age=6.5)}, {"S001"}, None, now=7.0) == []  # gone a whole grace
    assert w.observe({"S002": heard()}, {"S001"}, None, now=8.0) == []  # starts again


def test_a_member_that_does_not_say_its_store_is_still_found():
    w = watch()
    w.observe({"S002": heard(store="")}, {"S001"}, None, now=0.0)
    assert w.observe({"S002": heard(store="")}, {"S001"}, None, now=6.0)[0].theirs == NOT_SAID


# -- the beacon's optional "store" (core.beacons) ------------------------------------------
def beacon(store=""):
    return Beacon(KMSN, "S002", "127.0.0.22", 9530, "leader", 7, 3, "0123456789abcdef", 11, store=store)


def test_a_beacon_without_a_store_is_byte_for_byte_what_it_was():
    raw = beacon().encode(KEY)
    assert b'"store"' not in raw
    assert parse_beacon(raw, KEY, KMSN).store == ""


def test_a_beacon_with_a_store_verifies_under_the_v1_rules_and_is_read():
    raw = beacon("smb://files/w/socket").encode(KEY)
    doc = json.loads(raw)
    assert doc["store"] == "smb://files/w/socket" and doc["sig"] == sign(doc, KEY)  # v1: every field signed
    assert parse_beacon(raw, KEY, KMSN).store == "smb://files/w/socket"
    assert len(beacon("x" * 256).encode(KEY)) <= MAX_BYTES


@pytest.mark.parametrize("store", [17, "", "x" * 257, "bad\nline", None])
def test_a_store_that_says_something_odd_is_not_kept(store):
    doc = {**beacon().to_doc(), "store": store}
    doc["sig"] = sign(doc, KEY)
    assert parse_beacon(json.dumps(doc).encode(), KEY, KMSN).store == ""
