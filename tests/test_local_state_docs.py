"""The local state files' documents: what `dataclasses.asdict` made of them, without its deep copy
(`shallow_doc`: pool.json at every cycle of the worker, leadership.json at every move of a leader's
gate, relay.json every second; issue 41), and read back as what was written."""

import json
from dataclasses import asdict

from elections.core.skew import ClockReading
from elections.ports.local.localstate import Leadership, LocalState, RelayStatus
from elections.ports.local.pool_view import MemberView, PoolView


def a_view() -> PoolView:
    members = {
        "S001": MemberView(
            eligible=True,
            age=0.25,
            ip="127.0.0.21",
            health="ok",
            version=1,
            epoch=3,
            web_tls="",
            clock=ClockReading(-0.012, 0.004, "file server"),
            entry="127.0.0.21:9600",
            entry_sessions=2,
        ),
        "S002": MemberView(reasons=("stale heartbeat", "drained"), age=None, drain=True, priority=10),
    }
    return PoolView(
        kmsn="9999-9999-99-99", node="S001", updated=1234.5,
        lease={"node": "S001", "epoch": 3, "ip": "127.0.0.21", "port": 9530, "renew_seq": 7},
        lease_status="valid", lease_detail="S001 epoch 3", store_reachable=True, members=members,
        decision="lead: renewed", paused=False, lease_seen_at=1234.0, command_clock=4,
        refusals={"counts": {"forged": 1}, "recent": [{"cause": "forged", "at": 1.0}]},
        beacons={"members": {"S002": {"loss": 0.0, "gap_s": 0.2}}, "targets": ["127.255.255.255"]},
        share_ops=12, share_ops_by={"read members/": 3}, store={"kind": "file", "where": "file:/x"},
        share_split=[{"node": "S009", "store": "file:/y"}], ownership={"map": {"10.0.0.5": "S001"}},
    )  # fmt: skip


def test_the_document_is_what_asdict_made_of_the_view():
    view = a_view()
    before = asdict(view)  # how pool.json was made until issue 41's third round
    before["members"] = {n: {**asdict(m), "reasons": list(m.reasons)} for n, m in view.members.items()}
    assert json.dumps(view.to_doc(), sort_keys=True) == json.dumps(before, sort_keys=True)


def test_the_document_reads_back_as_the_same_view():
    view = a_view()
    assert PoolView.from_doc(json.loads(json.dumps(view.to_doc()))) == view


def a_leadership() -> Leadership:
    return Leadership(node="S001", pid=4242, leader=True, epoch=7, max_epoch=7, valid_until=99.5,
                      updated=97.25, decision="lead: renewed", seen=("S001", 7, 12),
                      valid_until_boot=101.5, successor=(8, "127.0.0.22", 9530),
                      writers=(("S001", 7, 12), ("S002", 6, 40)))  # fmt: skip


def a_relay_status() -> RelayStatus:
    snapshot = {"connections": 2, "clients": [{"peer": "127.0.0.9:5000", "kmsn": "9999"}],
                "listen": [{"address": "127.0.0.21:9530", "why": "node", "state": "bound"}]}  # fmt: skip
    return RelayStatus(pid=4343, epoch=7, listening=True, updated=98.0, snapshot=snapshot)


def test_leadership_and_relay_documents_are_what_asdict_made_of_them(tmp_path):
    local = LocalState(tmp_path)
    local.write_leadership(a_leadership())
    local.write_relay(a_relay_status())
    assert json.loads((tmp_path / "leadership.json").read_bytes()) == json.loads(
        json.dumps(asdict(a_leadership()))
    )
    assert json.loads((tmp_path / "relay.json").read_bytes()) == json.loads(
        json.dumps(asdict(a_relay_status()))
    )


def test_leadership_and_relay_read_back_as_written(tmp_path):
    local = LocalState(tmp_path)
    local.write_leadership(a_leadership())
    local.write_relay(a_relay_status())
    assert local.leadership() == a_leadership()
    assert local.relay() == a_relay_status()
