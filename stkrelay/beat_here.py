"""The agent's beat runs its lease entries itself, on its own thread of the lease worker.

Every entry of the beat (`CELERY_BEAT_SCHEDULE`: the renewal every `LEASE_RENEW`, the
poll every `LEASE_POLL`) is a task of this worker's own `lease` queue, which nothing
else feeds. Sent through the broker, each went out as a message to this agent's Redis
(kombu's producer, a new Redis client for each publish) and came back to the worker's
main thread (BRPOP, a Request, the tracer, an ack in a MULTI of three commands): about
half of a follower's lease-worker CPU that was not its beacons, for a call on the
same process (issue 41, measured with per-thread CPU profiles). Here the due task is
called on the beat's thread, as the solo worker would have called it: one at a time
(the beat runs one entry after the other, and `elections.tasks` keeps every cycle of
the agent under one lock), never two renewals in a burst (the in-memory schedule runs
an entry once when due, however late), and a renewal that waited on a slow cycle runs
as soon as that cycle ends, where its message's `expires` would have dropped it and
left the renewal to a later one. No producer is made: the beat never connects to the
broker.
"""

from __future__ import annotations

import logging
from typing import Any

from stkrelay.celery import SteadyScheduler

log = logging.getLogger("stkrelay.agent")


class InPlaceScheduler(SteadyScheduler):
    """`SteadyScheduler` whose due entries are called here, not sent (`ThreadedBeat`)."""

    @property
    def producer(self) -> None:
        """None: nothing is published (Celery's own makes a broker connection on first use)."""
        return None

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        task = self.app.tasks.get(entry.task)
        if task is None:
            log.error("beat: no task %s for the entry %s", entry.task, entry.name)
            return
        try:
            task(*entry.args, **entry.kwargs)
        except Exception:  # the beat goes on: the next entry is the next chance
            log.exception("beat: %s failed", entry.name)
