"""`relay.server.refusal_log.RefusalLog`: refused input is a few lines per cause, every refusal counted."""

from __future__ import annotations

import logging

from relay.server.refusal_log import MAX_CAUSES, OTHER, RefusalLog


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def lines(caplog) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.getMessage() for r in caplog.records]


def test_the_first_two_of_a_cause_are_told_then_one_summary_a_minute(caplog):
    caplog.set_level(logging.INFO, "test.refusals")
    clock = Clock()
    refusals = RefusalLog(logging.getLogger("test.refusals"), now=clock)
    for i in range(1000):
        refusals.refused("bad_json", "peer %d: bad_json", i)
    assert lines(caplog) == ["peer 0: bad_json", "peer 1: bad_json",
                             "further bad_json refusals are summed up every 60 s"]  # fmt: skip
    clock.t += 61
    refusals.refused("bad_json", "peer %d: bad_json", 1000)
    assert lines(caplog)[3:] == ["999 more bad_json refusals in the last 61 s (1001 in all)"]
    assert refusals.counts == {"bad_json": 1001}


def test_each_cause_has_its_own_lines_and_the_causes_kept_apart_are_bounded(caplog):
    caplog.set_level(logging.INFO, "test.refusals")
    refusals = RefusalLog(logging.getLogger("test.refusals"), now=Clock(), first=1)
    for i in range(MAX_CAUSES + 50):
        refusals.refused(f"cause{i}", "refused for cause %d", i)
    assert len(refusals.counts) == MAX_CAUSES + 1 and refusals.counts[OTHER] == 50
    told = [m for m in lines(caplog) if m.startswith("refused")]
    assert len(told) == MAX_CAUSES + 1  # one per cause kept apart, one for all the others


def test_with_a_timer_the_summary_comes_even_if_the_flood_stops(caplog):
    caplog.set_level(logging.INFO, "test.refusals")
    clock, timers = Clock(), []
    refusals = RefusalLog(logging.getLogger("test.refusals"), now=clock,
                          later=lambda delay, fn: timers.append((delay, fn)))  # fmt: skip
    for _ in range(5):
        refusals.refused("timeout", "a timeout")
    assert [d for d, _ in timers] == [60.0]  # one timer, however many were left out
    clock.t += 60
    timers.pop()[1]()
    assert lines(caplog)[-1] == "3 more timeout refusals in the last 60 s (5 in all)"
    refusals.refused("timeout", "a timeout")
    assert len(timers) == 1  # the next one left out starts the next summary
