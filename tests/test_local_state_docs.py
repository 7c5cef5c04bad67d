"""pool.json's document (`PoolView.to_doc`): what `dataclasses.asdict` made of the view, without
its deep copy (written at every cycle of the worker, issue 41), and read back as the same view."""

import json
from dataclasses import asdict

from elections.core.skew import ClockReading
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
