"""Which new pool events make the agent cycle (`elections.runtime.agent_looks`): a
command, a member's election or step-down, a binding; never an audit row alone, which
concerns people (issue 22: each command's audit row is nudged to every member, and its
cycle held the election lock while a handoff's target waited for it)."""

from types import SimpleNamespace

from elections.runtime.agent_looks import Looks, concern_the_election, highest_epoch


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


class QuietLooks(Looks):
    """`Looks` with what `_events_due` reads: a clock, the timing, the tail's backlog."""

    def __init__(self) -> None:
        self.now = 100.0
        self.clock = SimpleNamespace(monotonic=lambda: self.now)
        self.timing = SimpleNamespace(ttl=10.0)
        self.tail = SimpleNamespace(backlog=False)
        self._last_done: dict[str, float] = {}
        self._unprojected: list = []


def test_a_quiet_agent_reads_events_once_a_ttl_but_a_backlog_at_every_look():
    looks = QuietLooks()
    assert looks._events_due()  # the first look reads
    looks.now += 1
    assert not looks._events_due()  # quiet: the next a LEASE_TTL later (commands come with a nudge)
    looks.tail.backlog = True  # a joiner's history, a 30 MiB file planted on the share
    assert looks._events_due() and looks._events_due()
    looks.tail.backlog = False
    looks._unprojected = [[row("elected")]]  # the database is behind: ingest() decides
    assert looks._events_due()
    looks._unprojected = []
    assert not looks._events_due()
    looks.now += 10
    assert looks._events_due()
