"""The site's own relay as this leader's child (`RELAY_KIND = exec`, docs/design.md §16).

`ExternalRelay` runs `RELAY_EXEC` (`stkconfig.parsed.ExecRelay`, the
placeholders filled in for this epoch) while the relay runner serves, and:

- counts it as serving (`accepting`, then `on_up()`) only once a TCP connect
  to its port succeeds (probed every `PROBE_EVERY`); one that does not accept within
  `START_WITHIN` of its start is killed and counted as a failed start;
- restarts it when it exits, after the project's one `stkhost.retry.Backoff`
  (`RESTART_BACKOFF`: 0.5 s doubling to 10 s; a run longer than
  `STABLE_AFTER` starts the count again), calling `on_down()` first so the
  proxy closes the connections that went through it;
- `stop()`: SIGTERM to its process group, SIGKILL to the group `STOP_GRACE`
  later if anything of it is left, then reaped.

It is started in a session of its own (its own process group, so `stop()`
reaches whatever it starts) with ``PR_SET_PDEATHSIG(SIGKILL)``: if the relay
runner dies (kill -9 of the agent's group, the supervisor's SIGKILL), the
external relay dies with it rather than serve unfenced (a warm one, started by the standby
before its member leads, `relay.runner`, dies with the standby too). What it prints goes,
line by line and prefixed with its program's name, to the runner's output,
which the supervisor prefixes and logs. Its address is
loopback only (`RELAY_EXEC_LISTEN`): nothing but the proxy reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

from stkconfig.parsed import ExecRelay
from stkhost.processes import kill_group, site_environment, spawn_options
from stkhost.retry import Backoff

log = logging.getLogger("stkrelay.relay")

RESTART_BACKOFF = Backoff(tries=1 << 30, first=0.5, factor=2.0, cap=10.0)
STABLE_AFTER = 30.0  # seconds: a run this long that ends restarts with the shortest wait
START_WITHIN = 10.0  # seconds from its start to accepting, or it is killed and started again
PROBE_EVERY = 0.02
PROBE_TIMEOUT = 0.25
WATCH_EVERY = 0.1  # its exit is looked for this often
LINE_MAX = 4096  # bytes of one line of its output
STOP_GRACE = 0.5  # SIGTERM -> SIGKILL; the supervisor SIGKILLs the runner 1 s after asking it to stop


async def accepts_connections(host: str, port: int, timeout: float = PROBE_TIMEOUT) -> bool:
    """Does something accept a TCP connection on host:port now? (Connects, then closes at once.)"""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(timeout):
            await loop.sock_connect(sock, (host, port))
        return True
    except (TimeoutError, OSError):
        return False
    finally:
        sock.close()


class ExternalRelay:
    """One external relay process at a time, kept running while `run()` runs."""

    def __init__(
        self,
        spec: ExecRelay,
        *,
        epoch: int,
        kmsn: str,
        say: Callable[[str], None],
        on_up: Callable[[], None] = lambda: None,
        on_down: Callable[[str], None] = lambda why: None,
        backoff: Backoff = RESTART_BACKOFF,
        start_within: float = START_WITHIN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec, self.epoch, self.kmsn = spec, epoch, kmsn
        self.say, self.on_up, self.on_down = say, on_up, on_down
        self.backoff, self.start_within, self.clock = backoff, start_within, clock
        self.proc: subprocess.Popen[bytes] | None = None
        self.accepting = False
        self.starts = 0
        self.failures = 0
        self.last_exit: int | None = None
        self.last_error = ""
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.next_start: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._pumps: set[asyncio.Future[None]] = set()
        self._stopping = asyncio.Event()

    @property
    def name(self) -> str:
        return os.path.basename(self.spec.argv[0])

    @property
    def started(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self.run())

    async def run(self) -> None:
        """Start it, wait until it accepts, watch it; after it ends, wait the backoff and again."""
        while not self._stopping.is_set():
            ran = await self._one_run()
            if self._stopping.is_set():
                return
            if ran > STABLE_AFTER:
                self.failures = 0
            self.failures += 1
            delay = self.backoff.delay(self.failures - 1)
            self.next_start = self.clock() + delay
            self.say(f"runrelay: external relay {self.name}: {self.last_error}; restart in {delay:g} s")
            with contextlib.suppress(TimeoutError):  # asyncio.timeout: a cancel is never swallowed
                async with asyncio.timeout(delay):
                    await self._stopping.wait()
            self.next_start = None

    async def _one_run(self) -> float:
        """One life of the process; how long it lived."""
        argv = self.spec.command(epoch=self.epoch, kmsn=self.kmsn)
        began = self.clock()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=site_environment(),  # the site's binary: none of the agent's secrets
                **spawn_options(own_group=True, die_with_parent=True),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self.last_error = f"cannot start ({exc})"
            return 0.0
        assert self.proc.stdout is not None
        self._pumps.add(asyncio.ensure_future(self._pump(self.proc.stdout)))
        self.starts += 1
        self.started_at = began
        self.say(f"runrelay: external relay {self.name} started (pid {self.proc.pid}), "
                 f"loopback {self.spec.host}:{self.spec.port} and :{self.spec.passthrough_port}")  # fmt: skip
        try:
            if await self._until_accepting(began):
                self.accepting, self.ready_at = True, self.clock()
                self.say(f"runrelay: external relay {self.name} accepts on {self.spec.host}:{self.spec.port} "
                         f"after {self.ready_at - began:.2f} s")  # fmt: skip
                self.on_up()
                while self.proc.poll() is None and not self._stopping.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(WATCH_EVERY):
                            await self._stopping.wait()
        finally:
            was_up, self.accepting = self.accepting, False
            if was_up or self.proc.poll() is not None:
                self.on_down("relay_down")
        if self._stopping.is_set():
            return self.clock() - began
        code = self.proc.poll()
        if code is None:
            self.last_error = (
                f"did not accept on {self.spec.host}:{self.spec.port} within {self.start_within:g} s"
            )
        else:
            self.last_error = f"exited with {code}"
        await self._kill()
        return self.clock() - began

    async def _pump(self, pipe: Any) -> None:
        """Its output, line by line (at most LINE_MAX bytes each), into the runner's log, on the loop:
        one writer, so its lines and the runner's never interleave."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        carry = b""
        try:
            while chunk := await reader.read(4096):
                *lines, carry = (carry + chunk).split(b"\n")
                if len(carry) > LINE_MAX:
                    lines, carry = [*lines, carry[:LINE_MAX] + b"..."], b""
                for line in lines:
                    self.say(f"{self.name}: {line.decode('utf-8', 'replace').rstrip()}")
            if carry:
                self.say(f"{self.name}: {carry.decode('utf-8', 'replace').rstrip()}")
        finally:
            transport.close()

    async def _until_accepting(self, began: float) -> bool:
        assert self.proc is not None
        while not self._stopping.is_set() and self.proc.poll() is None:
            if await accepts_connections(self.spec.host, self.spec.port):
                return self.proc.poll() is None  # accepted by it, not by one that is gone
            if self.clock() - began > self.start_within:
                return False
            await asyncio.sleep(PROBE_EVERY)
        return False

    async def _kill(self) -> None:
        """SIGTERM to its group, SIGKILL to the group after STOP_GRACE, then reap it."""
        proc = self.proc
        if proc is None:
            return
        self._signal(proc.pid, signal.SIGTERM)
        until = self.clock() + STOP_GRACE
        while proc.poll() is None and self.clock() < until:
            await asyncio.sleep(0.02)
        self._signal(proc.pid, signal.SIGKILL)  # the group: what it started too, even if it left in time
        while proc.poll() is None:
            await asyncio.sleep(0.01)
        self.last_exit = proc.returncode
        self.proc = None
        pumps, self._pumps = self._pumps, set()
        if pumps:  # the group is gone, so is every writer of the pipe: its last lines, then done
            _, pending = await asyncio.wait(pumps, timeout=0.2)
            for pump in pending:
                pump.cancel()

    @staticmethod
    def _signal(pgid: int, sig: int) -> None:
        kill_group(pgid, sig)

    async def stop(self) -> None:
        """End `run()` and the process (within ~STOP_GRACE + a reap)."""
        self._stopping.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        was = self.proc.pid if self.proc is not None else None
        await self._kill()
        if was is not None:
            self.say(f"runrelay: external relay {self.name} (pid {was}) stopped, exit {self.last_exit}")

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        return {
            "command": self.name,
            "pid": self.proc.pid if self.proc is not None else None,
            "accepting": self.accepting,
            "address": [self.spec.host, self.spec.port, self.spec.passthrough_port],
            "starts": self.starts,
            "restarts": max(0, self.starts - 1),
            "last_exit": self.last_exit,
            "last_error": self.last_error,
            "up_s": round(now - self.ready_at, 1) if self.accepting and self.ready_at is not None else None,
            "next_start_in_s": round(self.next_start - now, 2) if self.next_start is not None else None,
        }
