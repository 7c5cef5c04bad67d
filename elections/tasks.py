"""Celery tasks of the lease queue. Safe when late or duplicated: each carries
`expires` (set by the beat schedule), and every write is compare-and-set, so a
late renewal can never resurrect a lost lease.

The cheap look between polls (`Agent.glance`, every LEASE_WATCH) runs on a
thread of the lease worker (`GlanceLoop`, started when the worker is ready), not
as a task through the broker: four tasks a second cost an idle agent more than
the look itself. One lock keeps the agent single-threaded: a renewal and a
look never run at the same time; each waits for the other to finish.
"""

import logging
import threading

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from elections.runtime.agent import Agent
from elections.runtime.agent import agent as the_agent

log = logging.getLogger("stkrelay.agent")


def agent() -> Agent:
    """This worker's agent, built from the Django project's configuration (`settings.STK`)."""
    return the_agent(settings.STK)


_lock = threading.Lock()  # one cycle of the agent at a time: the tasks' and the watcher's


@shared_task(name="elections.renew", ignore_result=True)
def renew() -> str:
    with _lock:
        return str(agent().tick(renewing=True))


@shared_task(name="elections.poll", ignore_result=True)
def poll() -> str:
    with _lock:
        return str(agent().tick(renewing=False))


@shared_task(name="elections.watch", ignore_result=True)  # the task's name is older than `glance`
def glance() -> str:
    with _lock:
        decision = agent().glance()
    return str(decision) if decision is not None else "no change"


class GlanceLoop(threading.Thread):
    """`Agent.glance()` every `every` seconds, beside the worker's tasks."""

    def __init__(self, every: float) -> None:
        super().__init__(name="lease-glance", daemon=True)
        self.every = every
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            try:
                with _lock:
                    agent().glance()
            except Exception:  # the next look tries again; renewals go on meanwhile
                log.exception("glance failed")


@worker_ready.connect
def _start_glancing(**_: object) -> None:
    GlanceLoop(settings.STK.lease_watch).start()
