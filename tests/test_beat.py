"""The agent's beat sleeps until an entry is due instead of spinning the last
10 ms before it (Celery's `adjust` turns a wait under 10 ms negative, and a
negative interval is not slept on). Run against kombu's in-memory transport:
a real broker of Celery's own, in this process."""

from __future__ import annotations

import time

from celery import Celery
from celery.beat import Scheduler

from stkrelay.celery import SteadyScheduler

EVERY = 0.2


def ticks_over(scheduler_cls: type[Scheduler], seconds: float) -> tuple[int, int]:
    """(ticks, tasks sent) of a beat loop like `celery.beat.Service.start`."""
    app = Celery("beat-test", broker="memory://")
    app.conf.beat_schedule = {"renew": {"task": "t.renew", "schedule": EVERY, "options": {"queue": "q"}}}
    sent = []
    scheduler = scheduler_cls(app, lazy=False)
    original = scheduler.apply_async

    def counted(entry, producer=None, advance=True, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(entry.name)
        return original(entry, producer, advance, **kwargs)

    scheduler.apply_async = counted  # type: ignore[method-assign]
    ticks, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        interval = scheduler.tick()
        ticks += 1
        if interval and interval > 0.0:
            time.sleep(interval)
    return ticks, len(sent)


def test_celerys_own_scheduler_spins_before_each_due_entry():
    # The reason for SteadyScheduler: if Celery fixes this, this test says so.
    ticks, sent = ticks_over(Scheduler, 1.5)
    assert sent >= 4
    assert ticks > 10 * sent, (ticks, sent)  # ~600 ticks a task when idle


def test_the_agents_scheduler_ticks_a_few_times_per_task_and_sends_every_one():
    ticks, sent = ticks_over(SteadyScheduler, 1.5)
    assert 5 <= sent <= 9, sent  # every 0.2 s over 1.5 s, none skipped, none doubled
    assert ticks <= 4 * sent + 4, (ticks, sent)


def test_adjust_never_turns_a_wait_into_no_wait():
    s = SteadyScheduler(Celery("beat-test", broker="memory://"), lazy=True)
    assert s.adjust(2.0) == 2.0 - 0.010
    for n in (0.009, 0.005, 0.0001):
        assert s.adjust(n) == n  # slept in full
    assert s.adjust(0) == 0 and s.adjust(-1) == -1  # due now: Celery's own meaning
