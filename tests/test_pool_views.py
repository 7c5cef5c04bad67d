"""relayctl's pure view helpers: each member's state, the yaml output, the stale refusal."""

import json
from types import SimpleNamespace

import pytest
import test_panel_support
import yaml

from elections.management.pool_views import member_state, stale_refusal, to_yaml

TTL = 3.0
dj = test_panel_support.dj  # the fixture, under its name here


@pytest.mark.parametrize(
    "node, age, drain, state",
    [
        ("S001", 0.5, False, "leader"),
        ("S002", 0.5, False, "follower"),
        ("S002", 0.5, True, "draining"),
        ("S002", TTL + 0.1, False, "unreachable"),
        ("S001", TTL + 0.1, False, "unreachable"),  # a leader whose heartbeat is old is not shown leading
        ("S002", 3 * TTL + 0.1, True, "gone"),
        ("S002", None, False, "gone"),
    ],
)
def test_each_member_has_one_state_by_its_heartbeats_age(node, age, drain, state):
    assert member_state(node, SimpleNamespace(age=age, drain=drain), "S001", TTL) == state


def test_the_yaml_output_reads_back_as_the_json_document_control_characters_and_all():
    doc = {
        "stale": False,
        "members": {"S001": {"state": "leader", "reasons": ["\x1b[31mred", "a: b", "- c"], "age": 0.25}},
        "empty": {},
        "none": [],
        "lease": None,
        "quote": 'x"y\n#z',
    }
    text = "\n".join(to_yaml(doc))
    assert "\x1b" not in text and "\n#z" not in text  # escaped, one scalar per line
    assert yaml.safe_load(text) == json.loads(json.dumps(doc))


def test_a_view_is_refused_only_past_its_ttl(dj):  # dj: the refusal is translated
    assert stale_refusal(None, TTL, "pool.json") is None
    assert stale_refusal(TTL, TTL, "pool.json") is None
    why = stale_refusal(TTL + 1.5, TTL, "pool.json")
    assert why is not None and "4.5 s old" in why and "--stale-ok" in why


def test_a_released_lease_is_listed_as_released_and_handing_off_never_as_valid(dj):
    from elections.management.pool_views import list_view
    from elections.ports.local.pool_view import MemberView, PoolView

    lease = {"node": "S001", "epoch": 10, "ip": "10.0.0.1", "port": 9530, "renew_seq": 4, "ttl_s": 0,
             "released": True, "handoff_to": "S003"}  # fmt: skip
    members = {n: MemberView(eligible=True, age=0.5) for n in ("S001", "S002", "S003")}
    pool = PoolView(kmsn="K", node="S002", updated=0.0, lease=lease, lease_status="valid", members=members)
    doc, lines, _ = list_view(pool, TTL, "pool.json", 0.5)
    text = "\n".join(lines)
    assert "released, handing off to S003" in text and "lease valid" not in text
    assert (doc["lease_status"], doc["handoff_to"]) == ("released", "S003")
    to_no_one = PoolView(**{**vars(pool), "lease": {**lease, "handoff_to": None}})
    _, lines, _ = list_view(to_no_one, TTL, "pool.json", 0.5)
    assert "lease released  (seen by" in "\n".join(lines)
    held = PoolView(**{**vars(pool), "lease": {**lease, "released": False, "ttl_s": 10}})
    _, lines, _ = list_view(held, TTL, "pool.json", 0.5)
    assert "lease valid" in "\n".join(lines) and held.handoff_to is None
