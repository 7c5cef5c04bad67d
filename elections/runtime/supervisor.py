"""The agent's process supervisor: runs its children, restarts the ones that
die (a standby child that exits cleanly is re-armed at once), stops a standby
child that still serves once the leadership state says this agent no longer
leads, and stops everything within 5 s on SIGTERM, releasing the lease first
if leader.

Children stay in the supervisor's process group (so `kill -9 -PGID` ends the
whole agent) and get SIGKILL if the supervisor dies (PR_SET_PDEATHSIG).

Why followers may take a supervisor's death for the death of its whole agent
(docs/design.md §13, the liveness port held by `runagent`):

- `PR_SET_PDEATHSIG(SIGKILL)` is set in each child between fork and exec; it
  survives exec and fires when the thread that forked it — the supervisor's
  main thread, the only one that starts children — exits, however it exits.
  A supervisor that dies in the instant between fork and `prctl` would be
  missed, so the child then checks that its parent is still the supervisor
  and kills itself if not. Children start no children that act for the pool.
- The kernel closes a dead process's sockets before it signals the children,
  so a follower may see the liveness connection end a moment before the
  relay and the worker are gone. That moment is covered twice: the follower
  also waits for 2 beacon intervals without a leader beacon of that boot
  (the worker sends them, and it dies with the supervisor), and the relay
  refuses registrations of a higher epoch (the winner's) anyway.
- A stopped agent (SIGSTOP) keeps its sockets: the connection stays up and
  new ones are still accepted by the kernel. A cut cable or a dead host
  answers nothing. Neither is evidence; the TTL decides.

A child that needs this agent's Redis (the worker: Celery's broker, its beat)
works only against the Redis that answers now (`runtime.redis_wait`). It is
started at once all the same, and waits inside for Redis to answer before its
consumer, its beat or its agent exist (`stkrelay.celery`): booted while Redis
is late, it is at work within a ping of Redis answering. Once it may have
connected to a server, it is SIGKILLed the moment that server goes away (no
cycle of it may write the lease then, and none is half-way: lease writes are
atomic renames or compare-and-set) and started again at once, to wait inside
again. That is no failure of the child: no backoff, however often Redis goes,
and no release on SIGTERM while Redis is away.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TextIO

from elections.core.terminal import terminal_safe
from elections.ports.local.localstate import RELAY_NAME, Leadership, LocalState
from elections.runtime.redis_wait import Link, RedisWait
from stkconfig.logs import as_json_line
from stkhost.dirwatch import DirWatch
from stkhost.processes import spawn_options, wake_pipe
from stkhost.retry import Backoff

log = logging.getLogger("stkrelay.supervisor")

STOP_WITHIN = 5.0  # seconds, from SIGTERM to every child gone
RELEASE_WITHIN = 2.5  # of STOP_WITHIN: handing the lease over (SHARE_TIMEOUT is 2 s by default)
KILL_AT = STOP_WITHIN - 1.0  # children still running then get SIGKILL
REAP_BY = STOP_WITHIN - 0.3  # and are waited for until then
RESTART_BACKOFF = Backoff(tries=1 << 30, first=1.0, factor=2.0, cap=30.0)
STABLE_AFTER = 30.0  # a child that ran this long and died restarts with the shortest backoff
SUPERVISE_EVERY = 0.5  # seconds between passes when nothing wakes one sooner (inotify, SIGCHLD)
KILL_AFTER = 1.0  # seconds from the supervisor's SIGTERM to its SIGKILL of a standby child
FENCE_WITHIN = 0.25  # seconds the shutdown waits for the relay to say it stopped before the release


@dataclass
class ChildSpec:
    name: str
    argv: list[str]
    # Always running, serving only while this agent leads (it checks by itself):
    # a clean exit (it served and lost leadership) restarts it at once, warm for
    # the next leadership; the supervisor stops it if it still serves 1 s after
    # the leadership state says this agent no longer leads.
    standby: bool = False  # it reports itself in DATA_DIR/relay.json (LocalState.relay)
    needs_redis: bool = False  # runs only while this agent's Redis answers (the worker)


@dataclass
class Child:
    spec: ChildSpec
    proc: subprocess.Popen[bytes] | None = None
    failures: int = 0
    not_before: float = 0.0
    started_at: float = 0.0
    serving_unled_since: float | None = None
    kill_at: float | None = None  # told to stop by the supervisor: SIGKILL if still alive then
    redis_run: str | None = None  # the run id of the Redis it was started against (needs_redis)
    killed_for_redis: bool = False  # killed because that Redis went away: its death is no failure

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Supervisor:
    def __init__(
        self,
        specs: list[ChildSpec],
        data_dir: str,
        env: dict[str, str],
        release: Callable[[Leadership], bool],
        out: TextIO | None = None,
        tick: float = 0.1,
        log_format: str = "text",
        node: str = "",
        kmsn: str = "",
        record_release: Callable[[Leadership], None] | None = None,
        redis: Link | None = None,
    ) -> None:
        self.children = [Child(s) for s in specs]
        self.data_dir = data_dir
        self.local = LocalState(data_dir)
        # This agent's own Redis (REDIS_URL): the children that need it run only while it answers.
        self.redis = None if redis is None else RedisWait(redis, self.local, self._say_agent, pid=os.getpid())
        self.env = env
        self.release = release
        # The history row of a release written on shutdown, once the children are gone: the worker
        # publishes its leadership before it writes that epoch's `elected` row, and a release row
        # written at once could come before it (CI: SIGTERM 50 ms after an election).
        self.record_release = record_release
        self.out = out or sys.stdout
        self.tick = tick
        self.log_format = log_format  # json: every line out is one JSON object (stkconfig/logs.py)
        self.node = node
        self.kmsn = kmsn
        self.stopping = threading.Event()
        self._wake_w: int | None = None
        self._failure: tuple[str, float, int] = ("", 0.0, 0)  # the last failed pass said, when, repeats since
        self._out_lock = threading.Lock()

    # -- output ----------------------------------------------------------------
    def say(self, name: str, line: str) -> None:
        if self.log_format == "json":
            text = as_json_line(line, self.node, name, kmsn=self.kmsn)
        else:
            text = f"[{name}] {terminal_safe(line.rstrip())}"  # a child's line, escaped (core.terminal)
        with self._out_lock:
            self.out.write(text + "\n")
            self.out.flush()

    def _say_agent(self, line: str) -> None:
        self.say("agent", line)

    def _pump(self, name: str, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self.say(name, raw.decode("utf-8", "replace"))
        stream.close()

    # -- children ----------------------------------------------------------------
    def _start(self, child: Child, now: float) -> None:
        try:
            proc = subprocess.Popen(
                child.spec.argv,
                env={**self.env, "STK_COMPONENT": child.spec.name},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                **spawn_options(die_with_parent=True),
            )
        except (OSError, subprocess.SubprocessError) as exc:  # fork refused, binary gone: a failed start
            child.failures += 1
            delay = RESTART_BACKOFF.delay(child.failures - 1)
            child.not_before = now + delay
            self.say("agent", f"could not start {child.spec.name} ({exc}); again in {delay:g} s")
            return
        child.proc = proc
        child.started_at = time.monotonic()
        child.killed_for_redis = False
        pump = threading.Thread(target=self._pump, args=(child.spec.name, proc.stdout), daemon=True)
        pump.start()
        self.say("agent", f"started {child.spec.name} (pid {proc.pid})")

    def _stop(self, child: Child, sig: int = signal.SIGTERM) -> None:
        if child.running and child.proc is not None:
            try:
                child.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def _leader(self, now: float) -> bool:
        state = self.local.leadership()
        return state.leads_now(now) and state.worker_alive()

    def step(self, now: float) -> None:
        """One supervision pass: reconcile children with what should run. It
        never waits on a child: a pass takes as long as a few `poll()`s."""
        leader = self._leader(now)
        run = self.redis.look(now) if self.redis is not None else ""
        for child in self.children:
            self._follow_redis(child, run, now)
            if child.running:
                if child.kill_at is not None:
                    if now >= child.kill_at:
                        self.say("agent", f"{child.spec.name} did not stop in {KILL_AFTER:g} s: SIGKILL")
                        self._stop(child, signal.SIGKILL)
                        child.kill_at = now + KILL_AFTER  # and again, should the kernel be slow
                elif child.spec.standby and not leader:
                    self._guard_standby(child, now)
                continue
            if child.proc is not None:  # it died
                code = child.proc.returncode
                child.proc = None
                stopped_by_us, child.kill_at = child.kill_at is not None, None
                if child.killed_for_redis or (child.spec.needs_redis and run is None):  # not its failure
                    child.failures, child.not_before = 0, 0.0
                    self.say("agent", f"{child.spec.name} ended ({code}) with its Redis; again at once")
                    # What it said of leadership no longer stands: no worker keeps it.
                    self.local.disclaim(f"the worker was stopped: Redis at {self.redis_shown()} went away")
                elif child.spec.standby and (code == 0 or stopped_by_us):
                    child.failures, child.not_before = 0, 0.0  # served, lost leadership: re-arm now
                else:
                    if now - child.started_at > STABLE_AFTER:
                        child.failures = 0  # it ran fine for a while: not a crash loop
                    child.failures += 1
                    delay = RESTART_BACKOFF.delay(child.failures - 1)
                    child.not_before = now + delay
                    self.say("agent", f"{child.spec.name} exited with {code}; restart in {delay:g} s")
            if now >= child.not_before:
                child.redis_run = run  # None: it waits inside for one to answer
                self._start(child, now)

    def redis_shown(self) -> str:
        return self.redis.link.shown if self.redis is not None else ""

    def _follow_redis(self, child: Child, run: str | None, now: float) -> None:
        """A child that needs Redis works only against `run`, the server that answers now (None:
        none does). One started while none answered waits inside, and takes the first that
        does; one that may have connected to another server is SIGKILLed at once."""
        if not child.spec.needs_redis or not child.running or child.killed_for_redis:
            return
        if child.redis_run is None:
            child.redis_run = run
        elif child.redis_run != run:
            self.say("agent", f"{child.spec.name}: its Redis went away: SIGKILL")
            child.killed_for_redis = True
            self._stop(child, signal.SIGKILL)
            child.kill_at = now + KILL_AFTER

    def _guard_standby(self, child: Child, now: float) -> None:
        """Not leader, yet the standby child says it serves: stop it after 1 s
        (SIGTERM, then SIGKILL `KILL_AFTER` later if it is still there)."""
        assert child.proc is not None and child.spec.standby
        if not self.local.relay_health().serving(pid=child.proc.pid):
            child.serving_unled_since = None
            return
        if child.serving_unled_since is None:
            child.serving_unled_since = now
        elif now - child.serving_unled_since > 1.0:
            self.say("agent", f"{child.spec.name} still serves without leadership: stopping it")
            self._stop(child)
            child.kill_at = now + KILL_AFTER
            child.serving_unled_since = None

    def run(self) -> int:
        """Supervise until SIGTERM/SIGINT (or `stop()`), then `shutdown()`.

        A pass runs when something it looks at may have changed — the relay
        replaced relay.json (inotify), a child ended (SIGCHLD), a signal came —
        and at least every SUPERVISE_EVERY (every `tick` where inotify cannot be
        had): an idle agent's supervisor does not wake ten times a second to find
        nothing changed. Not when the worker replaces leadership.json: a leader's
        worker does so at every move of its gate (3-5 times a second), and a pass
        reads it only for the standby guard (`_guard_standby`), whose grace of a
        second a look every SUPERVISE_EVERY serves (issue 41)."""
        self.local.clear_stopping()  # left by a crashed run
        # A claim left by an earlier run (a crash, a reboot: its monotonic times are another
        # boot's) stands for nothing until this run's worker publishes its own.
        self.local.disclaim("left by an earlier run of this agent")
        wake_r, self._wake_w = wake_pipe()
        previous = {
            sig: signal.signal(sig, lambda *_: self.stopping.set()) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, lambda *_: None)  # its byte wakes the wait
        old_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        try:
            with DirWatch(self.data_dir, (RELAY_NAME,)) as changes:
                every = SUPERVISE_EVERY if changes.watching else self.tick
                while not self.stopping.is_set():
                    try:
                        self.step(time.monotonic())
                    except Exception:  # the agent's children die with this process: never end here
                        self._failed_pass(traceback.format_exc())
                    wait, also = every, [wake_r]
                    if self.redis is not None:  # its end wakes a pass; while waiting, the next ping does
                        fd = self.redis.fileno()
                        also += [fd] if fd is not None else []
                        retry_in = self.redis.retry_in(time.monotonic())
                        wait = wait if retry_in is None else min(wait, retry_in)
                    changes.wait(wait, also=also)
            return self.shutdown()
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(wake_r)
            os.close(self._wake_w)
            self._wake_w = None

    def _failed_pass(self, trace: str) -> None:
        """Say a failed pass with its traceback; the same failure again only once a minute."""
        now = time.monotonic()
        last, said_at, repeats = self._failure
        if trace == last and now - said_at < 60.0:
            self._failure = (last, said_at, repeats + 1)
            return
        again = f" ({repeats} more times since)" if trace == last and repeats else ""
        self.say("agent", f"supervision pass failed{again}; going on\n{trace}")
        self._failure = (trace, now, 0)

    def stop(self) -> None:
        """From another thread: end `run()` as SIGTERM would."""
        self.stopping.set()
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"\0")

    def shutdown(self) -> int:
        """Stop within STOP_WITHIN of being called, whatever the share does (docs/design.md §11):
        hand the lease over within RELEASE_WITHIN (a share that takes longer is not
        answering: the pool takes over after the TTL instead), SIGTERM every child, SIGKILL
        every one still there at KILL_AT, and wait for them until REAP_BY."""
        started = time.monotonic()
        # First: the worker may publish no leadership claim any more (it may be
        # mid-cycle, with a read taken before the release below).
        self.local.mark_stopping()
        state = self.local.leadership()
        led = state.leads_now(time.monotonic())
        released = False
        if led and self.redis is not None and self.redis.run_id is None:
            # No worker runs while Redis is away, and nothing of this agent touches the lease then.
            self.say("agent", f"Redis at {self.redis_shown()} is away: the lease is left as it is "
                              "(no release); the pool takes over from a silent leader")  # fmt: skip
            led = False
        if led:
            # The fence, as the worker's own release has it (docs/design.md §5.1): the relay's gate shuts
            # (the leadership state says this agent leads no more) and the relay says it stopped, or
            # FENCE_WITHIN passes, before the release is written. Written first, a taker that heard no
            # resign of ours could open its gate by acks while our relay still served (SPIN's trail,
            # verify/: -DSUP_RELEASE).
            assert state.epoch is not None  # leads_now: it names one
            fenced_at = time.monotonic()
            self.local.disclaim(f"fenced epoch {state.epoch} before its release on shutdown")
            if not self.local.relay_stopped(state.epoch, fenced_at, FENCE_WITHIN):
                self.say("agent", f"relay did not confirm its stop within {FENCE_WITHIN:g} s: its gate is "
                                  "shut by now")  # fmt: skip
            released = self._release_within(state, RELEASE_WITHIN)
            self.local.disclaim(f"released epoch {state.epoch} on shutdown")
        for child in self.children:
            self._stop(child)
        self._reap(started + KILL_AT, signal.SIGKILL)
        stuck = self._reap(started + REAP_BY, None)
        for child in stuck:
            pid = child.proc.pid if child.proc is not None else "?"
            self.say(
                "agent", f"{child.spec.name} (pid {pid}) outlived SIGKILL: stuck in the kernel on the share?"
            )
        if led:  # again: the worker may have published once more before it stopped
            self.local.disclaim(f"released epoch {state.epoch} on shutdown")
        record_release = self.record_release
        if released and record_release is not None:
            self._bounded(lambda: record_release(state), started + STOP_WITHIN - time.monotonic(),
                          f"history row of the release of epoch {state.epoch}")  # fmt: skip
        self.say("agent", f"stopped in {time.monotonic() - started:.2f} s")
        return 0

    def _release_within(self, state: Leadership, within: float) -> bool:
        """`release(state)` on a thread of its own, waited for at most `within` seconds:
        a hung share makes the hand-over a bounded attempt, never the stop's wait. True if
        the release was written."""
        outcome: list[bool] = []
        what = f"release of epoch {state.epoch}"
        done = self._bounded(lambda: outcome.append(self.release(state)), within, what)
        if not done:
            self.say("agent", f"released epoch {state.epoch}: not done within {within:g} s "
                              "(share not answering); followers take over after the TTL")  # fmt: skip
        elif outcome:
            self.say("agent", f"released epoch {state.epoch}: {'done' if outcome[0] else 'not written'}")
        return bool(outcome and outcome[0])

    def _bounded(self, work: Callable[[], object], within: float, what: str) -> bool:
        """`work()` on a daemon thread, waited for at most `within` seconds (a hung share is
        left behind, never waited for). False if it did not end in time."""

        def attempt() -> None:
            try:
                work()
            except Exception as exc:  # a failed step must not stop the shutdown
                self.say("agent", f"{what} failed: {exc}")

        thread = threading.Thread(target=attempt, name="shutdown-step", daemon=True)
        thread.start()
        thread.join(max(0.0, within))
        return not thread.is_alive()

    def _reap(self, until: float, then: int | None) -> list[Child]:
        """Wait for every child until `until` (monotonic); send `then` to those still
        running at that moment, all at once. The children still running."""
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(max(0.0, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        left = [c for c in self.children if c.running]
        if then is not None:
            for child in left:
                self.say("agent", f"{child.spec.name} did not stop in time: SIGKILL")
                self._stop(child, then)
        return left
