"""`relayctl doctor`'s refusal lines (issue 42): routine datagram refusals WARN, hostile ones FAIL,
and no line shows an empty "last" time."""

from types import SimpleNamespace

import test_panel_support

from elections.core.evidence import Refusals
from elections.management.doctor_checks import mark, refusal_checks

dj = test_panel_support.dj


def checks_of(refusals):
    out = []

    def check(name, ok, detail, warn=False):
        out.append({"check": name, "ok": ok, "detail": detail, "warn": warn})

    refusal_checks(check, SimpleNamespace(refusals=refusals))
    return out


def test_a_copy_of_a_nudge_or_a_burst_warns_and_a_forged_datagram_or_share_record_fails(dj):
    r = Refusals()
    r.note("nudge from 127.0.0.22", "replayed", "audit of S002 (event seq 9): already seen", now=10.0)
    r.note("beacon from 127.0.0.23", "too_many", "more than 50 datagrams a second", now=11.0)
    from datetime import datetime

    doc = r.to_doc(12.0, wall=datetime(2026, 12, 7, 4, 0, 0).astimezone())
    routine = checks_of(doc)
    assert [mark(c) for c in routine] == ["WARN", "WARN", "WARN"], routine
    assert all("last 2026-12-07T0" in c["detail"] for c in routine[1:]), routine
    r.note("nudge from 127.0.0.99", "forged", "bad signature on nudge", now=12.0)
    r.note("relay_leader.json", "replayed", "replayed lease", at="2026-12-07T04:00:00+00:00", now=12.0)
    hostile = checks_of(r.to_doc(12.0))
    assert mark(hostile[0]) == "FAIL"
    assert {c["check"]: mark(c) for c in hostile[1:]} == {
        "refused relay_leader.json": "FAIL",
        "refused nudge from 127.0.0.99": "FAIL",
        "refused beacon from 127.0.0.23": "WARN",
        "refused nudge from 127.0.0.22": "WARN",
    }
    # Noted without a wall time and shown without one: still never an empty "last".
    assert all("last )" not in c["detail"] for c in hostile), hostile
