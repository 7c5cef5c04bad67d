"""A quiet pool's reads of the members' files (issue 22), on a real share
folder: beacons carry each sender's member record as last written (`mseq`,
`mdig`), so an agent reads one file only when a digest moved, and a steady pool
reads none, whatever its size. Hostile values of the new beacon fields are
refused like any other bad beacon."""

import json

import pytest

from elections.core.beacons import Beacon, member_digest, parse_beacon
from elections.core.untrusted import Untrusted
from elections.ports.share.share import SHARE_OPS, ShareOps
from elections.ports.store.store import FileLeaseStore
from elections.runtime.member_reads import MemberReads
from stkhost.clock import FakeClock

TOKEN = "tok-0123456789"
KMSN = "9999-9999-99-99"
NODES = [f"S{i:03d}" for i in range(1, 11)]


def beacon(**kw):
    return Beacon(KMSN, "S002", "10.0.0.2", 9530, "follower", 7, 4, "0123456789abcdef", 1, **kw)


def test_a_beacon_carries_the_senders_record_and_one_without_it_says_nothing():
    said = beacon(mseq=12, mdig="00112233aabbccdd")
    assert parse_beacon(said.encode(TOKEN), TOKEN, KMSN) == said
    plain = json.loads(beacon().encode(TOKEN))
    assert "mseq" not in plain and "mdig" not in plain  # what older receivers see: nothing new
    assert parse_beacon(beacon().encode(TOKEN), TOKEN, KMSN).mseq == 0


@pytest.mark.parametrize(
    "fields", [{"mseq": -1, "mdig": "00112233aabbccdd"}, {"mseq": True, "mdig": "00112233aabbccdd"},
               {"mseq": 3, "mdig": "not hex at all!!"}, {"mseq": 3, "mdig": 7}, {"mseq": 2**70, "mdig": ""}],
)  # fmt: skip
def test_bad_record_fields_make_the_whole_beacon_no_evidence(fields):
    from elections.core.lease import sign

    doc = json.loads(beacon().encode(TOKEN))
    doc.pop("sig")
    doc.update(fields)
    doc["sig"] = sign(doc, TOKEN)  # signed by a key holder, and still refused
    with pytest.raises(Untrusted) as exc:
        parse_beacon(json.dumps(doc).encode(), TOKEN, KMSN)
    assert exc.value.cause == "not_object"


def test_the_digest_ignores_the_seq_the_signature_and_whom_it_hears():
    doc = {"node": "S002", "ip": "10.0.0.2", "seq": 5, "drain": False, "hears": ["S001"], "sig": "ab"}
    same = dict(doc, seq=6, hears=["S001", "S003"], sig="cd")
    assert member_digest(doc) == member_digest(same)
    assert member_digest(dict(doc, drain=True)) != member_digest(doc)


@pytest.fixture
def pool(tmp_path):
    clock = FakeClock()
    stores = {n: FileLeaseStore(tmp_path, TOKEN, n, clock) for n in NODES}
    for node, store in stores.items():
        store.write_member({"node": node, "ip": "10.0.0.1", "seq": 1, "epoch": 7, "drain": False})
    return stores, clock


def said_by(stores):
    return {n: (s.own_record["seq"], member_digest(s.own_record)) for n, s in stores.items()}


def test_a_steady_pool_reads_no_member_file_and_one_change_costs_one_read(pool):
    stores, clock = pool
    me = stores["S001"]
    reads = MemberReads(me, "S001", heartbeat_ttl=10, lease_renew=3, lease_ttl=10, monotonic=clock.monotonic)
    docs, ok = reads.read(True, said_by(stores))
    assert ok and set(docs) == set(NODES)
    for _ in range(3):  # heartbeats: every seq moves, no record says anything new
        for node, store in stores.items():
            store.write_member({"node": node, "ip": "10.0.0.1", "seq": 1, "epoch": 7, "drain": False})
    clock.advance(1)
    before = SHARE_OPS.total
    docs, ok = reads.read(False, said_by(stores))
    assert ok and SHARE_OPS.total == before  # ten members, nothing read
    stores["S007"].write_member({"node": "S007", "ip": "10.0.0.1", "seq": 1, "epoch": 7, "drain": True})
    clock.advance(1)
    before, kinds = SHARE_OPS.total, SHARE_OPS.kinds()
    docs, ok = reads.read(False, said_by(stores))
    assert SHARE_OPS.total == before + 1 and docs["S007"]["drain"] is True
    assert SHARE_OPS.kinds()["read members/"] == kinds.get("read members/", 0) + 1  # counted by kind too
    assert docs["S001"] == me.own_record  # its own: the record it wrote


def test_members_whose_beacons_say_nothing_are_read_on_the_old_cadence_and_new_files_found(pool, tmp_path):
    stores, clock = pool
    reads = MemberReads(stores["S001"], "S001", heartbeat_ttl=10, lease_renew=3, lease_ttl=10,
                        monotonic=clock.monotonic)  # fmt: skip
    said = said_by(stores)
    reads.read(True, said)
    quiet = {n: v for n, v in said.items() if n != "S004"}  # S004's beacons stopped
    clock.advance(1)
    before = SHARE_OPS.total
    reads.read(False, quiet)
    assert SHARE_OPS.total == before  # the whole read 1 s ago counts: not before quiet_survey_every (3.5 s)
    clock.advance(3)
    reads.read(False, quiet)
    assert SHARE_OPS.total == before + 1  # S004's file, and only it
    reads.read(False, quiet)
    assert SHARE_OPS.total == before + 1
    newcomer = FileLeaseStore(tmp_path, TOKEN, "S011", clock)
    newcomer.write_member({"node": "S011", "ip": "10.0.0.11", "seq": 1, "epoch": 7})
    clock.advance(10)
    docs, _ = reads.read(False, quiet)
    assert "S011" in docs  # the listing once a LEASE_TTL finds it, beacons or not


def test_share_ops_are_told_apart_by_kind_and_a_bounded_number_of_kinds():
    ops = ShareOps()
    ops.count("read", "members/S002.json")
    ops.count("read", "members/S003.json")
    ops.count("replace", "relay_leader.json", 2)
    ops.count("listing", "")
    assert ops.kinds() == {"read members/": 2, "replace relay_leader.json": 2, "listing /": 1}
    for i in range(2 * ShareOps.KINDS_KEPT):
        ops.count("read", f"name{i}")
    kinds = ops.kinds()
    assert len(kinds) == ShareOps.KINDS_KEPT + 1 and kinds["other"] > 0
    assert ops.total == sum(kinds.values()) == 5 + 2 * ShareOps.KINDS_KEPT
