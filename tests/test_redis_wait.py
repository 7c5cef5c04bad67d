"""The supervisor and this agent's own Redis (runtime.redis_wait, ports.local.redis_link), with a real
redis-server on a loopback port and real child processes: the worker runs only while Redis
answers, is killed the moment it goes, and is back at once when it answers again."""

from __future__ import annotations

import io
import os
import select
import sys
import time
from pathlib import Path

import pytest
from harness import Redis, free_port, wait_until

from elections.errors import RedisUnavailable
from elections.ports.local.localstate import Leadership, LocalState
from elections.ports.local.redis_link import RedisLink, shown_url
from elections.runtime.redis_wait import REMIND_EVERY, RedisWait, until_answers
from elections.runtime.supervisor import ChildSpec, Supervisor

ROOT = Path(__file__).resolve().parent.parent
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def redis(tmp_path):
    server = Redis(tmp_path, start=False)
    yield server
    server.stop()


def test_the_url_shown_hides_its_password_and_keeps_the_rest():
    assert shown_url("redis://:s3cret@127.0.0.1:6380/0") == "redis://:***@127.0.0.1:6380/0"
    assert shown_url("redis://agent:s3cret@[::1]:6379/2") == "redis://agent:***@[::1]:6379/2"
    assert shown_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert shown_url("unix:///run/redis.sock?db=1") == "unix:///run/redis.sock?db=1"


def test_a_ping_of_no_redis_says_why_and_raises_nothing_else():
    link = RedisLink(f"redis://:pw@127.0.0.1:{free_port()}/0")
    with pytest.raises(RedisUnavailable) as caught:
        link.ping()
    assert "refused" in str(caught.value).lower()
    assert "pw" not in str(caught.value)
    assert link.watch() is None and link.watch_ended()


def test_a_url_that_names_no_server_is_a_reason_to_wait_never_an_exception():
    link = RedisLink("redis://127.0.0.1:notaport/0")
    with pytest.raises(RedisUnavailable, match="REDIS_URL cannot be used: Port could not be cast"):
        link.ping()
    assert link.watch() is None


def test_the_watch_ends_the_moment_redis_is_killed_and_a_restart_is_another_run_id(redis):
    redis.start()
    link = RedisLink(redis.url)
    first = link.ping()
    assert len(first) == 40  # redis-server's run_id
    fd = link.watch()
    assert fd is not None and not link.watch_ended()
    assert select.select([fd], [], [], 0.3)[0] == []  # an idle server says nothing
    redis.kill9()
    killed = time.monotonic()
    assert select.select([fd], [], [], 2.0)[0] == [fd]
    assert time.monotonic() - killed < 0.5
    assert link.watch_ended()
    with pytest.raises(RedisUnavailable):
        link.ping()
    redis.start()
    assert link.ping() not in ("", first)


def test_the_wait_is_said_once_reminded_once_a_minute_and_its_pings_back_off_to_1s(tmp_path, redis):
    lines: list[str] = []
    local = LocalState(tmp_path)
    wait = RedisWait(RedisLink(redis.url), local, lines.append, wall=lambda: 1_800_000_000.0, pid=os.getpid())
    pings = []
    now = 0.0
    while now < 2 * REMIND_EVERY + 1:  # a pass every 0.05 s of a fake clock; each ping is a real one
        tries = wait.status.tries
        assert wait.look(now) is None
        if wait.status.tries > tries:
            pings.append(round(wait.retry_in(now), 6))  # the wait it set for the next ping
        now = round(now + 0.05, 2)
    assert pings[:4] == [0.2, 0.4, 0.8, 1.0] and set(pings[4:]) == {1.0}
    assert 100 <= len(pings) <= 2 * REMIND_EVERY + 4  # ~one a second, never one a pass
    assert len(lines) == 3, lines  # the wait, and one reminder a minute: never a line per try
    assert lines[0].startswith(f"waiting for Redis at {redis.url} (") and "refused" in lines[0].lower()
    assert all(ln.startswith(f"still waiting for Redis at {redis.url} since 2027-01-15T08:00:00Z (")
               for ln in lines[1:])  # fmt: skip
    status = local.redis()
    assert status.waiting and status.tries == len(pings) and status.url == redis.url
    assert wait.retry_in(now) is not None and wait.retry_in(now) <= 1.0
    redis.start()
    answered = wait.look(now + 1.0)
    assert answered is not None and answered == wait.run_id
    assert lines[-1].startswith(f"Redis at {redis.url} answers after ") and local.redis().up
    assert wait.fileno() is not None and wait.retry_in(now) is None


def _started(sup: Supervisor, name: str) -> int:
    return sup.out.getvalue().count(f"started {name} (pid")  # type: ignore[attr-defined]


def test_the_worker_waits_for_redis_inside_is_killed_when_it_goes_and_started_again_without_backoff(
    tmp_path, redis
):
    out = io.StringIO()
    specs = [ChildSpec("web", SLEEPER), ChildSpec("worker", SLEEPER, needs_redis=True)]
    link = RedisLink(redis.url)
    sup = Supervisor(specs, str(tmp_path), dict(os.environ), lambda s: True, out=out, redis=link)
    web, worker = sup.children
    local = LocalState(tmp_path)

    def step() -> bool:
        sup.step(time.monotonic())
        return False

    def passes(seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            step()
            time.sleep(0.05)

    try:
        # No Redis: every child starts (the worker waits inside, stkrelay.celery), and the data
        # directory says why; a worker that never had a Redis is left to wait, not killed.
        wait_until(lambda: step() or local.redis().waiting, 5, "the wait in redis.json")
        passes(0.5)
        assert web.running and worker.running and _started(sup, "worker") == 1
        assert out.getvalue().count("waiting for Redis at") == 1
        # Redis comes: the waiting worker is left to take it.
        redis.start()
        wait_until(lambda: step() or local.redis().up, 5, "Redis seen")
        passes(0.3)
        assert worker.running and worker.redis_run == sup.redis.run_id and _started(sup, "worker") == 1
        # Redis killed: SIGKILL at the next pass, and a new worker at once, to wait inside again;
        # what the old one said of leadership is withdrawn once it is gone.
        now = time.monotonic()
        pid = worker.proc.pid
        claim = Leadership(node="S001", pid=pid, leader=True, epoch=3, valid_until=now + 60, updated=now)
        local.write_leadership(claim)
        redis.kill9()
        wait_until(lambda: step() or _started(sup, "worker") == 2, 5, "a new worker")
        assert "worker: its Redis went away: SIGKILL" in out.getvalue()
        assert worker.failures == 0 and worker.proc.pid != pid
        assert local.leadership().leader is False
        passes(1.5)  # a worker that never had this Redis is not killed again and again
        assert _started(sup, "worker") == 2 and worker.running and web.running
        # Back: the new worker takes it; nothing restarts.
        redis.start()
        wait_until(lambda: step() or local.redis().up, 5, "Redis seen again")
        passes(0.3)
        assert _started(sup, "worker") == 2 and _started(sup, "web") == 1
    finally:
        for child in sup.children:
            sup._stop(child, 9)


def test_until_answers_pings_with_the_backoff_until_redis_answers(redis):
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 6:
            redis.start()

    run_id = until_answers(RedisLink(redis.url), sleep=sleep)
    assert len(run_id) == 40 and slept == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


def test_a_stop_while_redis_is_away_releases_nothing(tmp_path, redis):
    released = []
    out = io.StringIO()
    sup = Supervisor([], str(tmp_path), dict(os.environ), lambda s: released.append(s) or True, out=out,
                     redis=RedisLink(redis.url))  # fmt: skip
    sup.step(time.monotonic())
    LocalState(tmp_path).write_leadership(Leadership(node="S001", pid=os.getpid(), leader=True, epoch=3,
                                                     valid_until=time.monotonic() + 60))  # fmt: skip
    assert sup.shutdown() == 0
    assert released == []
    assert "is away: the lease is left as it is (no release)" in out.getvalue()


def test_healthz_says_down_waiting_for_redis_to_anyone_and_where_and_since_when_to_loopback():
    import json

    import test_panel_support
    from test_panel_support import client_for

    from elections.ports.local.redis_status import RedisStatus

    data_dir = test_panel_support.django_env()["data_dir"]
    local = LocalState(data_dir)
    now = time.monotonic()
    claim = Leadership(node="S001", pid=os.getpid(), leader=True, epoch=7, max_epoch=7, valid_until=now + 60,
                       updated=now, decision="renew: S001 holds epoch 7")  # fmt: skip
    local.write_leadership(claim)
    url, why = "redis://127.0.0.1:6379/0", "Error 111 connecting to 127.0.0.1:6379. Connection refused"
    waiting = RedisStatus(pid=os.getpid(), url=url, up=False, since=1_800_000_000.0, tries=12, why=why)
    try:
        local.write_redis(waiting)
        stranger = client_for(REMOTE_ADDR="192.0.2.9").get("/healthz")
        assert stranger.status_code == 503
        told = {"status": "down", "role": "follower", "reason": "waiting for Redis"}
        assert json.loads(stranger.content) == told
        here = json.loads(client_for(REMOTE_ADDR="127.0.0.1").get("/healthz").content)
        assert here["redis"] == {"url": url, "since": "2027-01-15T08:00:00Z", "tries": 12, "why": why}
        # Written by a supervisor that is gone: it says nothing, the worker's state decides again.
        local.write_redis(RedisStatus(pid=2**22 + 12345, url=waiting.url, up=False, since=1.0))
        assert client_for(REMOTE_ADDR="192.0.2.9").get("/healthz").status_code == 200
        local.write_redis(RedisStatus(pid=os.getpid(), url=waiting.url, up=True, since=1.0))
        assert json.loads(client_for(REMOTE_ADDR="192.0.2.9").get("/healthz").content)["status"] == "up"
    finally:
        (data_dir / "redis.json").unlink(missing_ok=True)
        (data_dir / "leadership.json").unlink(missing_ok=True)
