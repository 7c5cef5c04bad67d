"""The supervisor's look at this agent's own Redis: which server answers now, if any.

The worker (Celery, and the beat on a thread of it) cannot work without its broker,
and while it runs it may write the lease (its ticks, the glance, the beacons' kicks).
So the supervisor runs it only against a Redis that answers (`Supervisor.step`):

- not up (a reboot where Redis comes late, a Redis killed): a worker that may have
  connected is killed at once, and started again to wait inside (`until_answers`,
  before its consumer, its beat or its agent exist) until a ping answers. Nothing of
  this agent writes the lease meanwhile: a leader falls silent, and the pool takes
  over as its rules say (at the latest when its lease runs out). The pings back off from 0.2 s doubling
  to 1 s (`RETRY`), with no end: a reboot where Redis comes an hour late still ends
  with the agent back.
- up, the same server: nothing to do. The held connection of `RedisLink.watch()`
  wakes the supervisor the instant the server goes away (no poll while it is up).
- up, another server (its run id changed: it restarted between two looks, with an
  empty database): the worker is restarted against it, as after a wait.

Said once when the wait starts, reminded every `REMIND_EVERY` (never a line per
try), and once when Redis answers again; written to `redis.json` for `/healthz`
and `relayctl doctor` ("waiting for Redis at <url> since <time>").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from elections.errors import RedisUnavailable
from elections.ports.local.localstate import LocalState
from elections.ports.local.redis_status import RedisStatus
from stkhost.retry import Backoff

# Seconds between pings while waiting: capped at 1 s, as a worker takes 2-3 s to start on a busy
# machine and the agent is to be back within 5 s of its Redis.
RETRY = Backoff(tries=1 << 30, first=0.2, factor=2.0, cap=1.0)
REMIND_EVERY = 60.0  # seconds between the reminders of a wait that goes on


class Link(Protocol):
    shown: str

    def ping(self) -> str: ...
    def watch(self) -> int | None: ...
    def watch_ended(self) -> bool: ...


def until_answers(link: Link, sleep: Callable[[float], None] = time.sleep) -> str:
    """Ping `link` until its Redis answers, backing off as `RETRY` says; its run id."""
    tries = 0
    while True:
        try:
            return link.ping()
        except RedisUnavailable:
            sleep(RETRY.delay(tries))
            tries += 1


class RedisWait:
    """Which Redis answers this agent now (`look`), said and written when that changes."""

    def __init__(
        self, link: Link, local: LocalState, say: Callable[[str], None],
        wall: Callable[[], float] = time.time, pid: int | None = None,
    ) -> None:  # fmt: skip
        self.link = link
        self.local = local
        self.say = say
        self.wall = wall
        self.run_id: str | None = None  # the server answering now; None while waiting
        self.status = RedisStatus(pid=pid, url=link.shown)
        self.waited_since: float | None = None  # monotonic start of the wait
        self.next_try = 0.0
        self.reminded_at = 0.0

    def look(self, now: float) -> str | None:
        """The run id of the Redis that answers now, None while there is none. Pings only
        when it must: while up, when the held connection ended (or there is none, TLS);
        while waiting, when the backoff says so."""
        if self.run_id is not None:
            if self.link.watch() is not None and not self.link.watch_ended():
                return self.run_id
        elif now < self.next_try:
            return None
        try:
            run_id = self.link.ping()
        except RedisUnavailable as exc:
            self._missed(now, str(exc))
            return None
        if run_id != self.run_id:
            self._answers(now, run_id)
        self.link.watch()
        return self.run_id

    def retry_in(self, now: float) -> float | None:
        """Seconds until the next ping while waiting (the supervisor's wait is no longer); None while up."""
        return None if self.run_id is not None else max(0.0, self.next_try - now)

    def fileno(self) -> int | None:
        """The held connection to wait on while up (None: nothing to wait on)."""
        return self.link.watch() if self.run_id is not None else None

    # -- what changed ------------------------------------------------------------------
    def _missed(self, now: float, why: str) -> None:
        first = self.waited_since is None
        if first:
            gone = self.run_id is not None
            self.waited_since, self.run_id, self.reminded_at = now, None, now
            self.status = replace(self.status, up=False, since=self.wall(), tries=1, why=why)
            if gone:
                self.say(f"Redis at {self.link.shown} went away ({why}): the worker is stopped, "
                         "and nothing of this agent writes the lease until Redis answers again")  # fmt: skip
            else:
                self.say(f"waiting for Redis at {self.link.shown} ({why}): the worker starts when it "
                         f"answers; trying again every {RETRY.first:g} s to {RETRY.cap:g} s")  # fmt: skip
        else:
            self.status = replace(self.status, tries=self.status.tries + 1, why=why)
            if now - self.reminded_at >= REMIND_EVERY:
                self.reminded_at = now
                self.say(f"still waiting for Redis at {self.link.shown} since {self.status.since_iso()} "
                         f"({self.status.tries} tries, the last: {why})")  # fmt: skip
        self.next_try = now + RETRY.delay(self.status.tries - 1)
        self.local.write_redis(self.status)

    def _answers(self, now: float, run_id: str) -> None:
        if self.waited_since is not None:
            self.say(f"Redis at {self.link.shown} answers after {now - self.waited_since:.1f} s "
                     f"({self.status.tries} tries): the worker starts")  # fmt: skip
        elif self.run_id is not None:
            self.say(f"Redis at {self.link.shown} restarted (a new server, its queues empty): "
                     "the worker restarts with it")  # fmt: skip
        self.run_id, self.waited_since = run_id, None
        self.status = replace(self.status, up=True, since=self.wall(), tries=0, why="")
        self.local.write_redis(self.status)
