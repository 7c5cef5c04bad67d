"""The hash-chained audit trail, the failover classification behind the
history page, the timeline chart, and `manage.py stkuser`."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
import test_panel_support
from test_panel_support import KMSN, client_for, make_user

dj = test_panel_support.dj  # the fixture, under its name here


def _append(n: int) -> list:  # type: ignore[type-arg]
    from elections import steering

    out = []
    for i in range(n):
        for phase in ("intent", "outcome"):
            out.append(
                steering.audit_trail().append(
                    phase=phase,
                    user="olga",
                    client="192.0.2.1",
                    via="panel",
                    action="drain",
                    kmsn="K",
                    target=f"S00{i}",
                    reason="r",
                    expected_epoch=i,
                    correlation=f"c{i}",
                    result="accepted" if phase == "outcome" else "",
                )
            )
    return out


def test_entries_are_chained_from_a_genesis_hash(dj):
    from elections import audit

    entries = _append(3)
    assert [e.seq for e in entries] == [1, 2, 3, 4, 5, 6]
    assert entries[0].prev_hash == audit.GENESIS
    assert all(b.prev_hash == a.hash for a, b in pairwise(entries))
    assert str(audit.verify_chain()) == "chain verified: 6 entries"


@pytest.mark.parametrize(
    ("change", "broken_at"),
    [
        ({"target": "S009"}, 3),  # content edited
        ({"result": "refused"}, 4),
        ({"hash": "0" * 64}, 3),  # hash replaced
    ],
)
def test_tampering_with_a_row_breaks_the_chain_there(dj, change, broken_at):
    from elections import audit

    _append(3)
    audit.AuditEntry.objects.filter(seq=broken_at).update(**change)
    status = audit.verify_chain()
    assert (status.ok, status.broken_at) == (False, broken_at)
    assert str(status).startswith(f"chain broken at #{broken_at}: ")


def test_a_deleted_row_breaks_the_chain(dj):
    from elections import audit

    _append(3)
    audit.AuditEntry.objects.filter(seq=2).delete()
    assert str(audit.verify_chain()) == "chain broken at #2: row #2 is missing"


def test_the_audit_page_shows_whether_the_chain_verifies(dj):
    from elections import audit

    _append(2)
    c = client_for(make_user("vera"))
    assert "Audit chain verified: 4 entries." in c.get("/audit/").content.decode()
    audit.AuditEntry.objects.filter(seq=3).update(reason="nothing to see")
    page = c.get("/audit/").content.decode()
    text = re.sub(r"<[^>]+>", "", page)  # the agent's own words are marked lang="en" in the page
    assert "Audit chain broken at #3: content does not match its hash." in text


def test_a_recomputed_hash_does_not_hide_an_edit(dj):
    """Rewriting a row with a matching hash still breaks the link to the next row."""
    from elections import audit

    _append(2)
    row = audit.AuditEntry.objects.get(seq=2)
    row.target = "S777"
    row.hash = row.compute_hash()
    row.save()
    assert audit.verify_chain().broken_at == 3


def test_the_canonical_content_covers_every_audited_field(dj):
    (entry, *_) = _append(1)
    doc = entry.canonical()
    for name in (
        "user",
        "client",
        "action",
        "target",
        "reason",
        "expected_epoch",
        "result",
        "correlation",
        "at",
    ):
        assert f'"{name}":' in doc
    assert doc == doc.strip() and ", " not in doc


# -- the pool's audit history ---------------------------------------------------------------
def _publish_remote(lease_dir, node: str, correlation: str, at: datetime) -> list:  # type: ignore[type-arg]
    """Write, as agent `node` would, the pool lines of one drain's intent and outcome."""
    from elections import audit
    from elections.ports.events.eventlog import JsonlEventSink
    from stkhost.clock import SystemClock

    sink = JsonlEventSink(lease_dir / "events" / f"{node}.jsonl", node, SystemClock())
    prev, out = audit.GENESIS, []
    for seq, phase in enumerate(("intent", "outcome"), 1):
        done = phase == "outcome"
        entry = audit.AuditEntry(
            seq=seq, prev_hash=prev, at=at + timedelta(seconds=seq), phase=phase, user="rémi",
            client="192.0.2.9", via="api", action="drain", kmsn="K", target="S001", reason="kernel",
            expected_epoch=7, force=False, result="accepted" if done else "",
            message="drain S001 accepted at epoch 7" if done else "", epoch=7 if done else None,
            correlation=correlation,
        )  # fmt: skip
        entry.hash = entry.compute_hash()
        prev = entry.hash
        sink.record("audit", 7, "kernel", audit=audit.pool_doc(entry))
        out.append(entry)
    return out


def _ingest(lease_dir) -> None:  # type: ignore[no-untyped-def]
    from elections.ports.events.eventlog import EventTail
    from elections.runtime.projection import ingest

    ingest(KMSN, EventTail(lease_dir / "events").new_events())


def test_a_local_entry_is_published_to_the_pool_with_its_hashes(dj):
    from elections.ports.events.eventlog import read_events

    entries = _append(1)
    lines = read_events(dj["lease_dir"] / "events" / "S001.jsonl")
    assert [e["kind"] for e in lines] == ["audit", "audit"]
    assert [(e["audit"]["seq"], e["audit"]["prev_hash"], e["audit"]["hash"]) for e in lines] == [
        (e.seq, e.prev_hash, e.hash) for e in entries
    ]
    assert lines[0]["audit"]["correlation"] == "c0" and lines[0]["audit"]["at"] == entries[0].at.isoformat(
        timespec="microseconds"
    )


def test_a_pool_line_that_cannot_be_written_does_not_refuse_the_entry(dj, monkeypatch, caplog):
    import shutil

    from elections import audit

    shutil.rmtree(dj["lease_dir"])  # the share is gone (the sink never recreates it)
    try:
        (entry, *_) = _append(1)
    finally:
        dj["lease_dir"].mkdir(parents=True)
    assert audit.AuditEntry.objects.count() == 2 and entry.seq == 1
    assert "not published to the pool" in caplog.text


def test_audit_rows_published_by_another_agent_show_on_the_page_and_in_the_api(dj):
    import json

    from elections import audit
    from elections.models import ElectionEvent

    _append(1)  # this agent's own (also published as S001's lines: not shown twice)
    later = datetime.now(UTC) + timedelta(hours=1)
    _publish_remote(dj["lease_dir"], "S003", "c-remote", later)
    _ingest(dj["lease_dir"])
    assert ElectionEvent.objects.filter(kind="audit", node="S003").count() == 2

    page = client_for(make_user("vera")).get("/audit/").content.decode()
    assert "Audit chain verified: 2 entries." in page  # this agent's own chain
    assert "Rows recorded by S003: chain verified from the 2 entries it published." in page
    assert '<tr data-correlation="c-remote" data-node="S003">' in page
    assert '<tr data-correlation="c0" data-node="S001">' in page
    assert page.count('data-correlation="c0"') == 1

    key = audit.ApiToken.issue(make_user("bot"))[1]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    doc = json.loads(client_for().get("/api/v1/audit", **auth).content)
    got = [(a["node"], a["correlation"], a["user"], a["result"], a["epoch"]) for a in doc["actions"]]
    assert got == [("S003", "c-remote", "rémi", "accepted", 7), ("S001", "c0", "olga", "accepted", None)]
    assert doc["count"] == 2 and doc["node"] == "S001"
    assert doc["pool_chains"] == {"S003": {"ok": True, "entries": 2, "broken_at": None, "detail": None}}
    only = json.loads(client_for().get("/api/v1/audit", {"user": "rémi"}, **auth).content)
    assert [a["node"] for a in only["actions"]] == ["S003"]

    # An edited published row is shown as such.
    row = ElectionEvent.objects.get(kind="audit", node="S003", detail__audit__seq=2)
    row.detail["audit"]["result"] = "refused"
    row.save()
    doc = json.loads(client_for().get("/api/v1/audit", **auth).content)
    assert doc["pool_chains"]["S003"]["broken_at"] == 2


def test_a_batch_of_history_is_projected_whole_but_for_the_records_the_database_cannot_hold(dj):
    from elections.models import ElectionEvent
    from elections.runtime.projection import ingest

    def e(seq, **fields):  # type: ignore[no-untyped-def]
        return {"node": "S002", "seq": seq, "kind": "elected", "epoch": 3, "at": "2026-06-15T20:30:15+00:00",
                "reason": f"#{seq}", **fields}  # fmt: skip

    batch = [
        e(1),
        e(2, epoch="x"),
        e(2**63),  # sqlite: "Python int too large to convert to SQLite INTEGER"
        e(3, epoch=2**63),
        e(4, node=4),
        e(5, kind=None),
        e(6, at="9999-12-31T23:59:59-23:00"),  # a UTC time past year 9999: shown as the time it came
        e(7),
    ]
    assert ingest(KMSN, batch) == 3
    rows = ElectionEvent.objects.filter(kmsn=KMSN).order_by("seq")
    assert [(r.node, r.seq, r.reason) for r in rows] == [
        ("S002", 1, "#1"),
        ("S002", 6, "#6"),
        ("S002", 7, "#7"),
    ]
    assert ingest(KMSN, batch) == 3 and rows.count() == 3  # idempotent on (kmsn, node, seq)


def test_audit_events_are_not_failovers(dj):
    from elections.web.panel.failovers import load_events

    _publish_remote(dj["lease_dir"], "S003", "c-remote", datetime.now(UTC))
    _ingest(dj["lease_dir"])
    assert load_events(KMSN) == []


# -- failover classification ---------------------------------------------------------------
T0 = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)


def ev(i: int, node: str, kind: str, epoch: int, sec: float, reason: str = "", **detail):  # type: ignore[no-untyped-def]
    from elections.web.panel.failovers import Ev

    return Ev(i, "K", node, epoch, kind, reason, T0 + timedelta(seconds=sec), detail)


def test_failovers_are_classified_from_the_elected_cause_and_the_events_before_it(dj):
    from elections.web.panel.failovers import derive

    events = [
        ev(1, "S001", "elected", 1, 0, "no lease file and no leader ever seen"),
        ev(2, "S002", "elected", 2, 100, "lease of S001 expired: ...", cause="expired", gap_s=3.4),
        ev(3, "S002", "drain_requested", 2, 200, target="S002", actor="olga", correlation="c1"),
        ev(4, "S002", "handoff", 2, 201, "released (drained), handoff to S003"),
        ev(5, "S003", "elected", 3, 201.5, "S002 handed epoch 2 to me", cause="handoff"),
        ev(6, "S001", "promote_requested", 3, 300, target="S001", actor="pat"),
        ev(7, "S003", "handoff", 3, 301, "released (promote), handoff to S001"),
        ev(8, "S001", "elected", 4, 301.2, "S003 handed epoch 3 to me", cause="handoff"),
        ev(9, "S001", "released", 4, 400, "released (shutdown)"),
        ev(10, "S002", "elected", 5, 400.5, "released by S001 (epoch 4)", cause="released"),
        ev(11, "S002", "handoff", 5, 500, "released (health: disk), handoff to S003"),
        ev(12, "S003", "elected", 6, 500.3, "S002 handed epoch 5 to me", cause="handoff"),
        ev(13, "S003", "drain_requested", 6, 600, target="S003", actor="olga", force=True),
        ev(14, "S001", "elected", 7, 610, "lease of S003 expired: ...", cause="expired", gap_s=3.1),
    ]
    got = [(f.epoch, f.from_node, f.to_node, f.reason, f.actor) for f in derive(events)]
    assert got == [
        (1, None, "S001", "first election", "pool"),
        (2, "S001", "S002", "lease expired", "pool"),
        (3, "S002", "S003", "drained", "olga"),
        (4, "S003", "S001", "promoted", "pat"),
        (5, "S001", "S002", "stepped down", "pool"),
        (6, "S002", "S003", "handoff", "pool"),
        (7, "S003", "S001", "forced", "olga"),
    ]
    gaps = [f.gap_s for f in derive(events)]
    assert (
        gaps[0] is None and gaps[1] == 3.4 and gaps[2] == pytest.approx(0.5) and gaps[4] == pytest.approx(0.5)
    )


def test_segments_end_at_their_own_end_event_or_the_next_election(dj):
    from elections.web.panel.failovers import segments

    events = [
        ev(1, "S001", "elected", 1, 0),
        ev(2, "S001", "released", 1, 50),
        ev(3, "S002", "elected", 2, 60),
        ev(4, "S003", "elected", 3, 90),
    ]
    got = [
        (s.node, s.epoch, (s.end - T0).total_seconds() if s.end else None)
        for s in segments(events, T0 + timedelta(seconds=120), current_epoch=3)
    ]
    assert got == [("S001", 1, 50.0), ("S002", 2, 90.0), ("S003", 3, None)]


def test_the_timeline_shades_gaps_only_after_the_first_recorded_leadership():
    from elections.web import svg

    bars = [
        svg.Bar("S001", 1, T0 + timedelta(minutes=30), T0 + timedelta(minutes=40)),
        svg.Bar("S002", 2, T0 + timedelta(minutes=45), None),
    ]
    out = svg.timeline(bars, ["S001", "S002", "S003"], T0, T0 + timedelta(hours=1))
    assert out.count('class="gap"') == 1  # 40-45 min, not 0-30 min
    assert out.count('class="lead"') == 2 and ">S003</text>" in out
    assert "S001 epoch 1, S002 epoch 2; about 300 s without a leader" in out
    evil = svg.timeline([svg.Bar("<script>", 1, T0, None)], [], T0, T0 + timedelta(hours=1))
    assert "<script>" not in evil and "&lt;script&gt;" in evil


# -- stkuser ----------------------------------------------------------------------------------
def run(*args: str, stdin: str = "") -> str:
    import sys

    from django.core.management import call_command

    out, saved = io.StringIO(), sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        call_command("stkuser", *args, stdout=out)
    finally:
        sys.stdin = saved
    return out.getvalue()


def test_stkuser_creates_users_with_a_role_and_a_password_from_stdin(dj):
    from django.contrib.auth import authenticate

    assert (
        run("add", "olga", "--role", "operator", stdin="a-long-passphrase\n") == "created olga (operator)\n"
    )
    user = authenticate(username="olga", password="a-long-passphrase")
    assert user is not None and user.has_perm("elections.drain_member")
    assert user.password.startswith("argon2")
    run("role", "olga", "--role", "viewer")
    user.refresh_from_db()
    user = type(user).objects.get(pk=user.pk)  # drop the permission cache
    assert not user.has_perm("elections.drain_member")
    assert "olga\tviewer\t0 token(s)" in run("list")


def test_stkuser_refuses_weak_passwords_and_duplicates(dj):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="password refused"):
        run("add", "olga", "--role", "viewer", stdin="12345\n")
    run("add", "olga", "--role", "viewer", stdin="a-long-passphrase\n")
    with pytest.raises(CommandError, match="exists"):
        run("add", "olga", "--role", "viewer", stdin="a-long-passphrase\n")


def test_stkuser_tokens_authenticate_the_api_until_revoked(dj):
    run("add", "bot", "--role", "viewer", stdin="a-long-passphrase\n")
    key = run("token", "bot", "--label", "grafana").strip()
    assert key.startswith("stk_")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    assert client_for().get("/api/v1/sites", **auth).status_code == 200
    assert run("revoke", "bot") == "1 token(s) of bot revoked\n"
    assert client_for().get("/api/v1/sites", **auth).status_code == 401


def test_a_row_forged_without_the_pool_key_shows_as_forged(dj):
    from elections import audit

    _append(2)
    row = audit.AuditEntry.objects.get(seq=4)
    row.target = "S777"
    row.hash = row.compute_hash(key="the-attackers-guess-0123")  # sha256 alone would not do either
    row.save()
    status = audit.verify_chain()
    assert (status.ok, status.broken_at, status.detail) == (False, 4, "content does not match its hash")


def test_rows_from_before_the_chain_was_keyed_verify_but_only_as_its_beginning(dj):
    from elections import audit

    _append(1)
    for row in audit.AuditEntry.objects.order_by("seq"):  # as written before keying
        row.alg = audit.LEGACY
        row.prev_hash = audit.AuditEntry.objects.filter(seq=row.seq - 1).values_list(
            "hash", flat=True
        ).first() or (audit.GENESIS)
        row.hash = row.compute_hash()
        row.save()
    _append(1)
    assert audit.verify_chain().ok and audit.verify_chain().entries == 4
    last = audit.AuditEntry.objects.get(seq=4)
    last.alg = audit.LEGACY  # an unkeyed row after keyed ones: anyone could have made it
    last.hash = last.compute_hash()
    last.save()
    status = audit.verify_chain()
    assert (status.broken_at, status.detail) == (4, "an unkeyed row after keyed ones: forged")


def test_an_agent_that_lost_its_active_event_file_goes_on_above_the_seqs_its_database_holds(dj, tmp_path):
    # The agent's own writer (DbEventSink) takes each seq from its database first: a deleted
    # active file, or a restart after one, never makes it write a seq it wrote before.
    import json

    from elections.ports.events.eventlog import JsonlEventSink
    from elections.runtime.projection import DbEventSink
    from stkhost.clock import SystemClock

    path = tmp_path / "events" / "S009.jsonl"
    path.parent.mkdir()
    DbEventSink(KMSN, "S009", JsonlEventSink(path, "S009", SystemClock())).record("elected", 3, "first")
    DbEventSink(KMSN, "S009", JsonlEventSink(path, "S009", SystemClock())).record("renewed_lost", 3, "then")
    path.unlink()
    restarted = DbEventSink(KMSN, "S009", JsonlEventSink(path, "S009", SystemClock()))
    restarted.record("elected", 4, "after the loss")
    assert [json.loads(line)["seq"] for line in path.read_text().splitlines()] == [3]


def test_an_agent_with_a_fresh_database_goes_on_above_the_seqs_the_pool_already_holds(dj, tmp_path):
    # A new disk, or a container without its volume: the database is empty, the pool's log
    # still has this node's events. Its next seq passes them (readers would drop a reused one).
    import json

    from elections.ports.events.eventlog import JsonlEventSink
    from elections.runtime.projection import DbEventSink
    from stkhost.clock import SystemClock

    path = tmp_path / "events" / "S011.jsonl"
    path.parent.mkdir()
    before = JsonlEventSink(path, "S011", SystemClock())  # its life before the database was lost
    for i in range(5):
        before.record("renewed_lost", 2, f"old {i}")
    DbEventSink(KMSN, "S011", JsonlEventSink(path, "S011", SystemClock())).record("elected", 3, "afresh")
    assert [json.loads(line)["seq"] for line in path.read_text().splitlines()] == [1, 2, 3, 4, 5, 6]


class HeldLine:
    """A pool log whose first line waits at `gate` once its writer is inside (`entered`)."""

    def __init__(self, inner, entered, gate) -> None:
        self.inner, self.entered, self.gate = inner, entered, gate

    def record(self, *args, **kwargs) -> None:
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        self.inner.record(*args, **kwargs)

    def last_seq(self) -> int:
        return self.inner.last_seq()


def _two_writers_of_one_node(tmp_path, node):
    import threading

    from elections.ports.events.eventlog import JsonlEventSink
    from elections.runtime.projection import DbEventSink
    from stkhost.clock import SystemClock

    path = tmp_path / "events" / f"{node}.jsonl"
    path.parent.mkdir()
    lock = tmp_path / "events.lock"
    entered, gate, second_done = threading.Event(), threading.Event(), threading.Event()
    first = DbEventSink(KMSN, node, HeldLine(JsonlEventSink(path, node, SystemClock()), entered, gate), lock)
    second = DbEventSink(KMSN, node, JsonlEventSink(path, node, SystemClock()), lock)
    out = {}
    a = threading.Thread(target=lambda: out.setdefault("first", first.record("handoff", 3, "the worker's")))
    a.start()
    assert entered.wait(10), "the first writer never reached its line"
    b = threading.Thread(target=lambda: (out.setdefault("second", second.record("audit", 3, "the web's")),
                                         second_done.set()))  # fmt: skip
    b.start()
    second_done.wait(1.0)  # without the order lock the second line lands first; with it, it cannot
    gate.set()
    a.join(10)
    b.join(10)
    return path, out


def test_two_writers_of_one_node_put_their_lines_on_the_pool_in_seq_order(dj, tmp_path):
    # The worker's handoff and the web's audit row of one drain: the database hands out seqs 1
    # and 2, and the pool's log must hold them in that order — every reader refuses a seq below
    # one it took (a replay), so seq 2 before seq 1 lost seq 1 on every agent (make long, etcd).
    import json

    from elections.ports.events.eventlog import EventTail

    path, out = _two_writers_of_one_node(tmp_path, "S021")
    assert (out["first"], out["second"]) == (1, 2)
    assert [json.loads(line)["seq"] for line in path.read_text().splitlines()] == [1, 2]
    tail = EventTail(path.parent)
    assert [e["reason"] for e in tail.new_events()] == ["the worker's", "the web's"]
    assert tail.refusals.total() == 0, tail.refusals.to_doc()


def test_a_writer_that_waits_too_long_for_the_order_lock_keeps_its_row_and_leaves_the_pool_in_order(
    dj, tmp_path, monkeypatch
):  # fmt: skip
    import json

    from elections.models import ElectionEvent
    from elections.runtime import projection

    monkeypatch.setattr(projection, "ORDER_WAIT_S", 0.2)
    path, out = _two_writers_of_one_node(tmp_path, "S022")
    assert (out["first"], out["second"]) == (1, None)  # the second's line was not written...
    rows = ElectionEvent.objects.filter(kmsn=KMSN, node="S022").order_by("seq")
    assert [(r.seq, r.reason) for r in rows] == [(1, "the worker's"), (2, "the web's")]  # ...its row was
    assert [json.loads(line)["seq"] for line in path.read_text().splitlines()] == [1]
