"""The agent's beat calls its due entries' tasks on its own thread (`InPlaceScheduler`): every
one, on time, one at a time, and never through the broker. The broker here is a Redis address
where nothing listens: a beat that connected to it, or published, would fail or hang."""

from __future__ import annotations

import threading
import time

from celery import Celery

from stkrelay.beat_here import InPlaceScheduler

EVERY = 0.2
NOWHERE = "redis://127.0.0.1:1/0"  # port 1: refused at once (nothing listens on 127.0.0.1:1)


def beat_over(seconds: float, fails: bool = False) -> tuple[int, list[tuple[str, float]], InPlaceScheduler]:
    """(ticks, the task's calls: its thread's name and when, the scheduler) of a beat loop like
    `celery.beat.Service.start`, run on this thread for `seconds`."""
    app = Celery("beat-here-test", broker=NOWHERE)
    calls: list[tuple[str, float]] = []

    name = f"t.renew.{'fails' if fails else 'works'}"  # one name a callable: Celery keeps the first

    @app.task(name=name)
    def renew() -> None:
        calls.append((threading.current_thread().name, time.monotonic()))
        if fails:
            raise RuntimeError("the share is gone")

    app.conf.beat_schedule = {"renew": {"task": name, "schedule": EVERY, "options": {"expires": 0.16}}}
    scheduler = InPlaceScheduler(app, lazy=False)
    ticks, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        interval = scheduler.tick()
        ticks += 1
        if interval and interval > 0.0:
            time.sleep(interval)
    return ticks, calls, scheduler


def test_every_due_entry_is_called_here_without_a_broker():
    started = time.monotonic()
    ticks, calls, scheduler = beat_over(1.5)
    assert 5 <= len(calls) <= 9, calls  # every 0.2 s over 1.5 s, none skipped, none doubled
    assert {name for name, _ in calls} == {threading.current_thread().name}  # the beat's own thread
    assert calls[0][1] - started >= EVERY * 0.9  # due an interval after the schedule was made
    assert ticks <= 4 * len(calls) + 4, (ticks, len(calls))  # still no spin before a due entry
    assert scheduler.producer is None
    assert "connection" not in vars(scheduler)  # Celery's cached broker connection was never made


def test_a_failing_task_neither_stops_the_beat_nor_escapes_it():
    _, calls, _ = beat_over(1.0, fails=True)
    assert len(calls) >= 3, calls
