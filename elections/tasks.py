"""Celery tasks of the lease queue. Safe when late or duplicated: every write is
compare-and-set, so a late renewal can never resurrect a lost lease. The agent's
beat calls them on its own thread of the lease worker (`stkrelay.beat_here`), one
at a time and never in a burst; sent through a broker instead, each carries
`expires` (set by the beat schedule).

The cheap look between polls (`Agent.glance`, every LEASE_WATCH) runs on a
thread of the lease worker (`GlanceLoop`, started when the worker is ready), not
as a task through the broker: four tasks a second cost an idle agent more than
the look itself. One lock keeps the agent single-threaded: a renewal and a
look never run at the same time; each waits for the other to finish.
"""

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from elections.runtime.agent import Agent, built
from elections.runtime.agent import agent as the_agent

log = logging.getLogger("stkrelay.agent")
T = TypeVar("T")


def agent() -> Agent:
    """This worker's agent, built from the Django project's configuration (`settings.STK`)."""
    return the_agent(settings.STK)


FINISH_WITHIN = 0.5  # seconds the way out waits for a cycle under way to finish


def shutting_down() -> None:
    """The worker is leaving (`stkrelay.celery`): a cycle under way may finish first, for up to
    `FINISH_WITHIN` (the solo pool's warm shutdown waited for its task: the beat's thread runs
    them now, `stkrelay.beat_here`); then the agent, if built, writes what it keeps."""
    finished = _lock.acquire(timeout=FINISH_WITHIN)
    try:
        built_agent = built()
        if built_agent is not None:
            built_agent.keep()
    finally:
        if finished:
            _lock.release()


_lock = threading.Lock()  # one cycle of the agent at a time: the tasks' and the watcher's
_failed: set[str] = set()  # the kinds of failure already logged with their traceback


def _cycle(what: str, run: Callable[[], T]) -> T | None:
    """`run()` under the lock; a failure is a cycle that saw no evidence and did nothing more,
    logged with its traceback once per kind (then at DEBUG), never a task that dies every
    second with a traceback each time (issue 40: one poisoned file, every task dying)."""
    try:
        with _lock:
            return run()
    except Exception as exc:
        kind = f"{what}:{type(exc).__name__}"
        if kind in _failed:
            log.debug("%s failed again (%s), no evidence this cycle", what, type(exc).__name__)
        else:
            _failed.add(kind)
            log.exception("%s failed, taken as no evidence this cycle (said once per kind of failure)", what)
        return None


@shared_task(name="elections.renew", ignore_result=True)
def renew() -> str:
    return str(_cycle("renewal", lambda: agent().tick(renewing=True)))


@shared_task(name="elections.poll", ignore_result=True)
def poll() -> str:
    return str(_cycle("poll", lambda: agent().tick(renewing=False)))


@shared_task(name="elections.watch", ignore_result=True)  # the task's name is older than `glance`
def glance() -> str:
    decision = _cycle("glance", lambda: agent().glance())
    return str(decision) if decision is not None else "no change"


class GlanceLoop(threading.Thread):
    """`Agent.glance()` every `every` seconds, beside the worker's tasks; first, one poll.

    The beat sends its first poll one `LEASE_POLL` after it starts (an in-memory schedule's
    entries are due an interval after they are made): an agent that starts would follow
    its leader, or take an empty pool, that much later for nothing (issue 41). So the
    first cycle runs here, as the worker is ready; it is the poll task's own cycle."""

    def __init__(self, every: float) -> None:
        super().__init__(name="lease-glance", daemon=True)
        self.every = every
        self.stopping = threading.Event()

    def run(self) -> None:
        _cycle("poll", lambda: agent().tick(renewing=False))
        while not self.stopping.wait(self.every):
            _cycle("glance", lambda: agent().glance())  # the next look tries again; renewals go on


@worker_ready.connect
def _start_glancing(**_: object) -> None:
    GlanceLoop(settings.STK.lease_watch).start()
