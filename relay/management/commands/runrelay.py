"""`python manage.py runrelay`: the relay's TCP listeners, while this agent leads.

The agent's supervisor starts it while the leadership state file says this
agent leads (DESIGN.md §4). It serves framed JSON on ``NODE_IP:RELAY_PORT``
and passthrough on ``RELAY_PORT+1`` with the epoch of the state it started
with, and:

- asks `LeadershipGate` at every registration: the state file (re-read at most
  every 100 ms) must still say leader, with the same epoch, a renew deadline
  (``valid_until``, monotonic) not yet passed, and a live lease worker pid.
  A deadline that passes refuses registrations at once (``not_leader``).
- every `TICK` asks the gate too; once it says no, reads the lease to tell
  clients where the leader went (``leader_changed`` with the new leader's
  epoch/ip/port when a valid lease names another node with a higher epoch,
  else nulls), closes everything and exits 0.
- every 0.5 s writes ``DATA_DIR/relay.json`` (tmp + rename)::

      {"pid": 123, "epoch": 7, "listening": true, "updated": <monotonic>,
       "snapshot": RelayServer.snapshot()}

  and a last one with ``"listening": false`` on the way out.
- SIGTERM/SIGINT: ``leader_changed`` with nulls, exit 0 within 1 s.

Exit status: 0 after serving or when not leader at start; 1 if a port
cannot be bound; 2 on a configuration problem (one line each).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand

from elections.ports.clock import SystemClock
from elections.ports.localstate import Leadership, LocalState, RelayStatus
from elections.ports.stores import PoolPlace, open_store
from relay.server import RelayServer

log = logging.getLogger("stkrelay.relay")

TICK = 0.1
STANDBY_POLL = 0.05
STATUS_EVERY = 0.5
LEASE_READ_WITHIN = 0.5
Successor = tuple[int | None, str | None, int | None]
NOBODY: Successor = (None, None, None)


class LeadershipGate:
    """`gate()` of the relay: does this agent still lead, with `epoch`?

    The state file is read at most every `cache_s`; the deadline in it is
    compared with the clock at every call.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        epoch: int,
        cache_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.local, self.epoch, self.cache_s, self.clock = LocalState(data_dir), epoch, cache_s, clock
        self._state = Leadership()
        self._pid_ok = False
        self._read_at: float | None = None

    def _refresh(self, now: float) -> None:
        if self._read_at is not None and now - self._read_at < self.cache_s:
            return
        self._state = self.local.leadership()
        self._pid_ok = self._state.worker_alive()
        self._read_at = now

    def why_not(self) -> str | None:
        """None while this agent leads with `epoch`; else the reason, for the log."""
        now = self.clock()
        self._refresh(now)
        state = self._state
        if not state.leader:
            return "the leadership state says this agent is not the leader"
        if not state.leads_now(now):
            return "the renew deadline in the leadership state has passed"
        if state.epoch != self.epoch:
            return f"the epoch changed from {self.epoch} to {state.epoch}"
        if not self._pid_ok:
            return f"the lease worker (pid {state.pid}) is gone"
        return None

    def __call__(self) -> bool:
        return self.why_not() is None


class Command(BaseCommand):
    help = "Run the relay's TCP listeners (JSON and passthrough) while this agent leads."
    requires_system_checks: list[str] = []  # config problems: one line each, in handle()

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--standby", action="store_true",
            help="start warm and wait: serve as soon as this agent leads and the fenced "
            "start_relay action of its epoch has run (DATA_DIR/relay.wanted)",
        )  # fmt: skip

    def _await_leadership(self, stk: Any) -> int:
        """Poll the leadership state and the relay marker every STANDBY_POLL; the
        imports are done, so the listeners are up within ~0.1 s of the action."""
        local = LocalState(stk.data_dir)
        while True:
            epoch = local.leadership().held_epoch(time.monotonic())
            if (
                epoch is not None and local.relay_wanted() == epoch
                and LeadershipGate(stk.data_dir, epoch).why_not() is None
            ):  # fmt: skip
                return epoch
            time.sleep(STANDBY_POLL)

    def handle(self, *args: Any, **options: Any) -> None:
        from django.conf import settings

        stk = settings.STK
        if stk.problems:
            for problem in stk.problems:
                self.stderr.write(f"runrelay: config {stk.source}: {problem.line()}")
            raise SystemExit(2)
        if options["standby"]:
            epoch = self._await_leadership(stk)
        else:
            epoch = LocalState(stk.data_dir).leadership().held_epoch(time.monotonic())
            if epoch is None:
                why = "the leadership state does not say this agent leads now"
            else:
                why = LeadershipGate(stk.data_dir, epoch).why_not()
            if why is not None:
                self.stdout.write(f"runrelay: {stk.node} is not the leader ({why}): not serving")
                return
        assert isinstance(epoch, int)
        code = asyncio.run(RelayRunner(stk, epoch, self._say, self._complain).run())
        if code:
            raise SystemExit(code)

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _complain(self, line: str) -> None:
        self.stderr.write(line)
        self.stderr.flush()


class RelayRunner:
    """Serve while the gate holds; on losing it, redirect clients and return 0."""

    def __init__(self, stk: Any, epoch: int, say: Callable[[str], None], complain: Callable[[str], None]):
        self.stk, self.epoch, self.say, self.complain = stk, epoch, say, complain
        self.gate = LeadershipGate(stk.data_dir, epoch)
        self.local = LocalState(stk.data_dir)
        self.server = RelayServer(
            node=stk.node,
            kmsn=stk.kmsn,
            token=stk.relay_token,
            gate=self.gate,
            epoch=epoch,
            max_frame=stk.relay_max_frame,
            keepalive=stk.relay_keepalive,
            pool_key=stk.pool_key,
            station_keys_only=stk.relay_station_keys_only,
            max_per_address=stk.relay_max_per_address or None,
        )

    async def run(self) -> int:
        stk, server = self.stk, self.server
        loop = asyncio.get_running_loop()
        try:
            await server.start(stk.node_ip, stk.relay_port)
        except OSError as exc:
            self.complain(
                f"runrelay: cannot listen on {stk.node_ip}:{stk.relay_port} and :{stk.relay_port + 1}: "
                f"{exc.strerror or exc}"
            )
            return 1
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        self.say(
            f"runrelay: {stk.node} epoch {self.epoch} serving {stk.kmsn} on {stk.node_ip}:"
            f"{stk.relay_port} (json) and :{stk.relay_port + 1} (passthrough)"
        )
        self.write_status(True)
        next_status = loop.time() + STATUS_EVERY
        while True:
            await asyncio.sleep(TICK)
            if stopping.is_set():
                reason, successor = "stopped by signal", NOBODY
                break
            why = self.gate.why_not()
            if why is not None:
                reason, successor = f"lost leadership: {why}", await self.successor()
                break
            if loop.time() >= next_status:
                self.write_status(True)
                next_status = loop.time() + STATUS_EVERY
        told = server.snapshot()["connections"]
        server.lose_leadership(*successor)
        await server.wait_closed(0.5)
        self.write_status(False)
        epoch, ip, port = successor
        self.say(f"runrelay: {reason}; told {told} connections epoch={epoch} ip={ip} port={port}; exiting")
        return 0

    async def successor(self) -> Successor:
        """The new leader from the lease, read off-loop (a dead share may hang): or nulls."""
        stk = self.stk
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def read() -> None:
            try:
                store = open_store(PoolPlace.of(stk), stk.node, SystemClock())
                future.set_result(store.read())
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=read, name="lease-read", daemon=True).start()
        try:
            lease = await asyncio.wait_for(asyncio.wrap_future(future), LEASE_READ_WITHIN)
        except Exception as exc:
            log.warning("cannot read the lease to name the new leader: %s", exc or type(exc).__name__)
            return NOBODY
        record = lease.record
        if lease.status != "valid" or record is None or record.released:
            return NOBODY
        if record.node == stk.node or record.epoch <= self.epoch:
            return NOBODY
        return record.epoch, record.ip, record.port

    def write_status(self, listening: bool) -> None:
        status = RelayStatus(os.getpid(), self.epoch, listening, time.monotonic(), self.server.snapshot())
        try:
            self.local.write_relay(status)
        except OSError as exc:
            log.warning("cannot write the relay status in %s: %s", self.local.dir, exc)
