"""Which new pool events make the agent cycle (`elections.runtime.agent`): a
command, a member's election or step-down, a binding; never an audit row alone, which
concerns people (issue 22: each command's audit row is nudged to every member, and its
cycle held the election lock while a handoff's target waited for it)."""

from types import SimpleNamespace

from elections.core.decide import Decision, Verdict
from elections.runtime.agent import Agent, concern_the_election, highest_epoch, skips_cycle


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


class QuietLooks(Agent):
    """An `Agent` with only what `_events_due` reads: a clock, the timing, the tail's backlog."""

    def __init__(self) -> None:  # no super().__init__(): nothing else of the agent is built
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


def test_a_quiet_tick_stands_only_on_a_settled_decision():
    """A leader woken from a freeze steps down; quiet at once (it hears the new leader's
    beacons), it skipped every cycle after and said "step_down" for good (bench/failover_beacons:
    the woken leader never showed as following). Only following or holding stands."""
    settled = [Verdict.FOLLOW, Verdict.HOLD, Verdict.RENEW, Verdict.IDLE]
    for verdict in Verdict:
        last = Decision(verdict, "r")
        assert skips_cycle(True, last, news=False, renewing=False, leads=False) is (verdict in settled)
        assert not skips_cycle(False, last, news=False, renewing=False, leads=False)  # not quiet
        assert not skips_cycle(True, last, news=True, renewing=False, leads=False)  # news
        assert not skips_cycle(True, last, news=False, renewing=True, leads=True)  # a renewal
    assert not skips_cycle(True, None, news=False, renewing=False, leads=False)  # never cycled yet
