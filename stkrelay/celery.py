"""The agent's Celery app: broker is this agent's own Redis, never a shared one.

`celery -A stkrelay.celery worker --stk-beat ...` runs the agent's one beat
(in-memory schedule, docs/design.md §12) on a thread of the lease worker instead
of a process of its own: one interpreter less per agent, and beat lives and
dies with the worker whose queue it feeds. It calls its entries' tasks there
itself (`stkrelay.beat_here.InPlaceScheduler`) instead of sending them through
the broker to the worker's main thread.
"""

import contextlib
import os
import threading
from typing import Any

from celery import Celery, bootsteps
from celery.beat import Scheduler
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_init,
    worker_shutdown,
    worker_shutting_down,
)
from click import Option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stkrelay.settings")

app = Celery("stkrelay")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["elections"])


class SteadyScheduler(Scheduler):
    """Celery's in-memory beat scheduler, without its spin before each due entry.

    `Scheduler.adjust` wakes 10 ms early (`n - 0.010`). For a wait shorter
    than that it returns a negative interval, which `beat.Service` does not
    sleep on: it ticks again at once, thousands of times, until the entry is
    due. With renewals and polls every few seconds that spin was ~10 ms of
    CPU per task sent, 0.7 % of a core of an idle agent (measured with
    per-thread utime/stime). Here a wait that would turn non-positive is
    slept in full instead."""

    def adjust(self, n: Any, drift: float = -0.010) -> Any:
        if n and n > 0:
            return n + drift if n + drift > 0 else n
        return n


class ThreadedBeat(bootsteps.StartStopStep):
    """The beat of this agent on a thread of the worker (`--stk-beat`), which runs its
    entries there (`stkrelay.beat_here.InPlaceScheduler`)."""

    label = "stk-beat"
    conditional = True

    def __init__(self, worker: Any, stk_beat: bool = False, **kwargs: Any) -> None:
        self.enabled = bool(stk_beat)
        super().__init__(worker, **kwargs)

    def create(self, worker: Any) -> Any:
        from celery.beat import EmbeddedService

        return EmbeddedService(worker.app, thread=True, scheduler_cls="stkrelay.beat_here:InPlaceScheduler")

    def stop(self, parent: Any) -> None:
        """Tell the beat to stop, without waiting: Celery's own stop waits until its thread wakes
        from its sleep to the next due entry (up to a LEASE_RENEW), and the schedule is in memory:
        nothing to keep. Its thread is a daemon: it ends with the worker (issue 42)."""
        if self.obj is not None:
            self.obj.service.stop(wait=False)

    terminate = stop


app.user_options["worker"].add(
    Option(["--stk-beat"], is_flag=True, default=False, help="Run the beat on a thread of the worker.")
)
app.steps["worker"].add(ThreadedBeat)


@worker_init.connect
def _wait_for_redis(**_: Any) -> None:
    """Before the consumer, the beat or the agent exist: wait for this agent's Redis (and
    for the database, while a first start's `migrate` child runs: `wait_migrated`).

    The supervisor starts the worker at once, Redis or not (`runtime.supervisor`): booted
    while Redis is late (a reboot) or gone (killed: the worker with it), the worker is at
    work within a ping of Redis answering, where Celery's own retry waits 2, 4, ... 30 s
    between tries. Nothing of it touches the lease before it returns. The supervisor says
    why it waits (log, /healthz, relayctl doctor); this wait says nothing."""
    from django.conf import settings

    from elections.management.migrations_due import wait_migrated
    from elections.ports.local.redis_link import RedisLink
    from elections.runtime.redis_wait import until_answers

    wait_migrated(settings.STK.data_dir)  # a first start's migrate child, started beside this worker
    until_answers(RedisLink(settings.STK.redis_url))


# Seconds from SIGTERM within which the worker leaves, whatever its warm shutdown still waits for.
LEAVE_WITHIN = 1.0
_leaving = threading.Lock()


@worker_shutting_down.connect
def _leave_within(**_: Any) -> None:
    """SIGTERM came: leave within `LEAVE_WITHIN`, done or not with Celery's warm shutdown. Nothing
    is sent to the lease queue (the beat calls its entries itself, `stkrelay.beat_here`), so the
    consumer's idle BRPOP is answered only at its timeout (`polling_interval`, 5 s), and closing
    the broker connection waits for that answer: 3 s measured, past the supervisor's budget
    (issue 41). The warm shutdown has nothing else to wait for: no task runs on the main thread."""
    timer = threading.Timer(LEAVE_WITHIN, _leave, kwargs={"code": 0})
    timer.daemon = True
    timer.start()


@worker_shutdown.connect
def _exit_now(sender: Any = None, **_: Any) -> None:
    """The worker's warm shutdown is done (the consumer and the beat stopped): leave at once.
    What the interpreter's own finalization does after this took 1-4 s here (a garbage
    collection of the agent's heap and its threads' leftovers), past the supervisor's budget:
    every SIGTERM ended with `worker did not stop in time: SIGKILL` (issue 42)."""
    code = getattr(sender, "exitcode", 0)
    _leave(code if isinstance(code, int) else 0)


def _leave(code: int) -> None:
    """Leave the process now, once (the first caller of the warm shutdown's end and
    `LEAVE_WITHIN`'s timer; the other waits here until the process is gone). Everything the
    agent keeps is written as it changes (the database commits each row, the webhook's queue and
    leadership.json are replaced atomically); the beacons' replay memory is written here, after
    a cycle under way finished (`shutting_down`), and logs and streams are flushed."""
    import logging
    import sys

    _leaving.acquire()
    try:
        from elections.tasks import shutting_down

        shutting_down()
    except Exception:  # leaving anyway: what was kept as it changed is kept
        logging.getLogger("stkrelay.agent").exception("on the way out")
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


@after_setup_logger.connect
@after_setup_task_logger.connect
def _json_logs(logger: Any = None, **kwargs: Any) -> None:
    """LOG_FORMAT = json: Celery's own handlers (worker, beat) write JSON lines too."""
    from django.conf import settings

    from stkconfig.logs import use_json

    stk = settings.STK
    if stk.log_format == "json" and logger is not None:
        use_json(logger, stk.node, kmsn=stk.kmsn)
