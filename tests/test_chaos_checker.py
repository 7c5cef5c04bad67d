"""The chaos checker (tests/chaos_checker.py) on hand-built histories: each
violation it exists for is found, and a clean failover, operations whose order
is ambiguous, and overlapping faults are not reported."""

from chaos_checker import check, completed, load, merged, quiet_points
from chaos_checker import faults_of as faults_in


class H:
    """A history under construction: operations, receipts and faults."""

    def __init__(self) -> None:
        self.recs: list[dict] = []

    def op(self, f, proc, t0, t1, result="ok", **kw):  # type: ignore[no-untyped-def]
        self.recs.append({"type": "invoke", "f": f, "proc": proc, "time": t0, **kw})
        self.recs.append({"type": result, "f": f, "proc": proc, "time": t1, **kw})
        return self

    def probe(self, agent, t0, t1, epoch=None, error=None):  # type: ignore[no-untyped-def]
        if error:
            return self.op("probe", f"probe-{agent}", t0, t1, "fail", agent=agent, error=error)
        return self.op("probe", f"probe-{agent}", t0, t1, agent=agent, node=agent, epoch=epoch)

    def info(self, f, t, **kw):  # type: ignore[no-untyped-def]
        self.recs.append({"type": "info", "f": f, "time": t, **kw})
        return self

    def fault(self, n, kind, start, end):  # type: ignore[no-untyped-def]
        self.info("fault", start, phase="start", fault=n, kind=kind, target="S001")
        return self.info("fault", end, phase="end", fault=n, kind=kind, target="S001")


BOUNDS = {"kill9": 10.0, "sigstop": 10.0}


def _kinds(report):  # type: ignore[no-untyped-def]
    return [v.kind for v in report.violations]


def test_a_clean_failover_has_no_violation():
    h = H().probe("S001", 0.0, 0.1, epoch=1).probe("S001", 1.0, 1.1, epoch=1)
    h.fault(1, "kill9", 1.5, 1.6).probe("S001", 2.0, 2.1, error="refused").probe(
        "S002", 2.0, 2.2, error="not_leader"
    )
    h.probe("S002", 5.0, 5.1, epoch=2).probe("S001", 5.5, 5.6, error="not_leader")
    report = check(h.recs, BOUNDS)
    assert report.ok, report.violations
    assert report.counts["probe"] == 3
    [rec] = report.recoveries
    assert rec.quiet == 1.6 and abs(rec.after - (5.1 - 1.6)) < 1e-9


def test_an_old_leader_that_accepts_after_the_new_one_acknowledged_is_two_leaders():
    h = H().probe("S001", 0.0, 0.1, epoch=1).probe("S002", 5.0, 5.1, epoch=2)
    h.probe("S001", 5.2, 5.3, epoch=1)  # invoked after S002's ok: S001 still served epoch 1
    report = check(h.recs, BOUNDS)
    assert _kinds(report) == ["overlapping_leaders"]
    assert "S001 (epoch 1)" in report.violations[0].detail and report.violations[0].time == 5.1


def test_acceptances_whose_order_is_ambiguous_are_not_reported():
    # S001's last acceptance was invoked before S002's first one completed: it may
    # have taken effect before S002's, so nothing proves that both served at once.
    h = H().probe("S001", 4.0, 5.5, epoch=1).probe("S002", 4.5, 5.0, epoch=2)
    assert check(h.recs, BOUNDS).ok


def test_the_same_epoch_on_two_nodes_is_found_from_probes_and_registrations():
    h = H().probe("S001", 0.0, 0.1, epoch=3)
    h.info("registered", 0.5, proc="C01", node="S002", epoch=3)
    report = check(h.recs, BOUNDS)
    assert _kinds(report) == ["epoch_reused"]
    assert "['S001', 'S002']" in report.violations[0].detail


def test_an_acknowledged_message_never_delivered_is_lost_and_others_are_not():
    h = H().probe("S001", 0.0, 0.1, epoch=1)
    h.op("send", "C01", 1.0, 1.1, id="m1", epoch=1).info("recv", 1.05, proc="P01", id="m1")
    h.op("send", "C01", 1.2, 1.3, id="m2", epoch=1)  # acknowledged, never received
    h.op("send", "C01", 1.4, 1.5, "fail", id="m3", error="no_route")  # refused: no promise
    h.recs.append({"type": "invoke", "f": "send", "proc": "C01", "time": 1.6, "id": "m4"})  # never answered
    h.info("recv", 2.0, proc="P01", id="m1")  # a duplicate is fine
    report = check(h.recs, BOUNDS)
    assert _kinds(report) == ["lost_message"] and "'m2'" in report.violations[0].detail
    assert report.indeterminate == 1


def test_a_pool_that_recovers_too_late_or_never_is_reported():
    slow = H().probe("S001", 0.0, 0.1, epoch=1).fault(1, "kill9", 1.0, 2.0).probe("S002", 13.0, 13.5, epoch=2)
    assert _kinds(check(slow.recs, BOUNDS)) == ["slow_recovery"]
    never = H().probe("S001", 0.0, 0.1, epoch=1).fault(1, "kill9", 1.0, 2.0)
    never.probe("S002", 12.5, 12.6, error="not_leader")
    assert _kinds(check(never.recs, BOUNDS)) == ["no_recovery"]
    # A history that ends before the bound passed cannot say "never".
    short = H().probe("S001", 0.0, 0.1, epoch=1).fault(1, "kill9", 1.0, 2.0).probe("S002", 4, 4.1, error="x")
    assert check(short.recs, BOUNDS).ok


def test_recovery_is_timed_from_when_no_fault_is_active():
    h = H().probe("S001", 0.0, 0.1, epoch=1)
    h.fault(1, "kill9", 1.0, 2.0).fault(2, "sigstop", 1.5, 8.0)  # the stop outlasts the kill
    h.probe("S002", 3.0, 3.1, error="not_leader").probe("S002", 8.5, 9.0, epoch=2)
    report = check(h.recs, BOUNDS)
    assert report.ok
    assert {r.fault.id: r.quiet for r in report.recoveries} == {1: 8.0, 2: 8.0}
    assert all(abs(r.after - 1.0) < 1e-9 for r in report.recoveries)
    # Overlapping faults heal as the slowest kind among them: its bound applies to all.
    mixed = H().fault(1, "kill9", 1.0, 2.0).fault(2, "share_hang", 1.5, 3.0)
    mixed.probe("S002", 16.0, 16.5, epoch=2)
    assert check(mixed.recs, {"kill9": 10.0, "share_hang": 20.0}).ok
    assert _kinds(check(mixed.recs, {"kill9": 10.0, "share_hang": 12.0})) == ["slow_recovery"] * 2
    # An acceptance invoked before the quiet point does not count as recovery.
    late = H().fault(1, "kill9", 1.0, 2.0).probe("S002", 1.9, 2.5, epoch=2).probe("S002", 2.6, 2.7, epoch=2)
    assert abs(check(late.recs, BOUNDS).recoveries[0].after - 0.7) < 1e-9


def test_violations_are_attributed_to_the_faults_around_them_in_the_table():
    h = H().probe("S001", 0.0, 0.1, epoch=1).fault(1, "sigstop", 1.0, 4.0).probe("S002", 5.0, 5.1, epoch=2)
    h.probe("S001", 5.2, 5.3, epoch=1).op(
        "send", "C01", 40.0, 40.1, id="m9", epoch=2
    )  # lost, far from faults
    report = check(h.recs, BOUNDS)
    assert _kinds(report) == ["overlapping_leaders", "lost_message"]
    assert report.attributed == {"sigstop": 1, "(no fault)": 1}
    table = report.table()
    assert "sigstop" in table and "(no fault)" in table and "1.10 s" in table
    (none_kind, none_count, none_worst, none_bad), (kind, count, worst, bad) = report.rows()
    assert (none_kind, none_count, none_worst, none_bad) == ("(no fault)", 0, None, 1)
    assert (kind, count, bad) == ("sigstop", 1, 1) and abs(worst - 1.1) < 1e-9


def test_history_parsing_pairs_each_proc_with_its_next_completion():
    lines = [
        '{"type": "invoke", "f": "probe", "proc": "a", "time": 1}',
        "",
        '{"type": "invoke", "f": "probe", "proc": "b", "time": 1.5}',
        '{"type": "ok", "f": "probe", "proc": "a", "time": 2, "epoch": 1}',
        '{"type": "invoke", "f": "probe", "proc": "a", "time": 3}',
    ]
    pairs = completed(load(lines))
    assert [(i["proc"], i["time"], d and d["time"]) for i, d in pairs] == [
        ("a", 1, 2),
        ("b", 1.5, None),
        ("a", 3, None),
    ]


def test_a_fault_never_ended_lasts_to_the_end_of_the_history():
    h = (
        H()
        .info("fault", 1.0, phase="start", fault=7, kind="net_cut", target="S002")
        .probe("S001", 3, 3.1, epoch=1)
    )
    [fault] = faults_in(h.recs)
    assert (fault.start, fault.end, fault.kind) == (1.0, 3.1, "net_cut")
    assert quiet_points([fault]) == {7: 3.1}


def test_reports_of_several_runs_merge_into_one_table():
    one = check(
        H().probe("S001", 0, 0.1, epoch=1).fault(1, "kill9", 1, 2).probe("S002", 3, 3.5, epoch=2).recs, BOUNDS
    )
    two = H().fault(1, "kill9", 1, 2).probe("S002", 3, 6.0, epoch=2).op("send", "C01", 7, 7.1, id="x")
    two = check(two.recs, BOUNDS)
    total = merged([one, two])
    assert [(k, n, bad) for k, n, _, bad in total.rows()] == [("kill9", 2, 1)]
    assert abs(total.rows()[0][2] - 4.0) < 1e-9 and total.counts == {"probe": 3, "send": 1}
    assert [v.kind for v in total.violations] == ["lost_message"]
