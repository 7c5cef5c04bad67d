"""The agent's Celery app: broker is this agent's own Redis, never a shared one.

`celery -A stkrelay.celery worker --stk-beat ...` runs the agent's one beat
(in-memory schedule, DESIGN.md §12) on a thread of the lease worker instead
of a process of its own: one interpreter less per agent, and beat lives and
dies with the worker whose queue it feeds.
"""

import os
from typing import Any

from celery import Celery, bootsteps
from celery.beat import Scheduler
from celery.signals import after_setup_logger, after_setup_task_logger, worker_init
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
    """The beat of this agent on a thread of the worker (`--stk-beat`)."""

    label = "stk-beat"
    conditional = True

    def __init__(self, worker: Any, stk_beat: bool = False, **kwargs: Any) -> None:
        self.enabled = bool(stk_beat)
        super().__init__(worker, **kwargs)

    def create(self, worker: Any) -> Any:
        from celery.beat import EmbeddedService

        return EmbeddedService(worker.app, thread=True, scheduler_cls="stkrelay.celery:SteadyScheduler")


app.user_options["worker"].add(
    Option(["--stk-beat"], is_flag=True, default=False, help="Run the beat on a thread of the worker.")
)
app.steps["worker"].add(ThreadedBeat)


@worker_init.connect
def _wait_for_redis(**_: Any) -> None:
    """Before the consumer, the beat or the agent exist: wait for this agent's Redis.

    The supervisor starts the worker at once, Redis or not (`runtime.supervisor`): booted
    while Redis is late (a reboot) or gone (killed: the worker with it), the worker is at
    work within a ping of Redis answering, where Celery's own retry waits 2, 4, ... 30 s
    between tries. Nothing of it touches the lease before it returns. The supervisor says
    why it waits (log, /healthz, relayctl doctor); this wait says nothing."""
    from django.conf import settings

    from elections.ports.redis_link import RedisLink
    from elections.runtime.redis_wait import until_answers

    until_answers(RedisLink(settings.STK.redis_url))


@after_setup_logger.connect
@after_setup_task_logger.connect
def _json_logs(logger: Any = None, **kwargs: Any) -> None:
    """LOG_FORMAT = json: Celery's own handlers (worker, beat) write JSON lines too."""
    from django.conf import settings

    from stkconfig.logs import use_json

    stk = settings.STK
    if stk.log_format == "json" and logger is not None:
        use_json(logger, stk.node, kmsn=stk.kmsn)
