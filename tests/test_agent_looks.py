"""Which new pool events make the agent cycle (`elections.runtime.agent_looks`): a
command, a member's election or step-down, a binding; never an audit row alone, which
concerns people (issue 22: each command's audit row is nudged to every member, and its
cycle held the election lock while a handoff's target waited for it)."""

from elections.runtime.agent_looks import concern_the_election, highest_epoch


def row(kind: str, epoch: int = 3) -> dict:
    return {"kind": kind, "node": "S001", "seq": 7, "epoch": epoch}


def test_an_audit_row_alone_is_no_news_for_the_election_but_anything_beside_it_is():
    assert not concern_the_election([row("audit")])
    assert not concern_the_election([row("audit"), row("audit")])
    for kind in ("promote_requested", "drain_requested", "elected", "handoff", "station_bound"):
        assert concern_the_election([row(kind)]), kind
        assert concern_the_election([row("audit"), row(kind)]), kind
    assert not concern_the_election([])


def test_an_audit_rows_epoch_is_never_this_pools():
    assert highest_epoch([row("audit", 10**9), row("elected", 4)]) == 4
