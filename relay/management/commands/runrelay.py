"""`python manage.py runrelay`: the relay's TCP listeners, while this agent leads.

The agent's supervisor starts it while the leadership state file says this
agent leads (docs/design.md §4). It serves framed JSON on ``NODE_IP:RELAY_PORT``
and passthrough on ``RELAY_PORT+1`` with the epoch of the state it started
with, and:

- asks `LeadershipGate` at every registration: the state file (re-read at most
  every 100 ms) must still say leader, with the same epoch, a renew deadline
  (``valid_until``, monotonic) not yet passed, and a live lease worker pid.
  A deadline that passes refuses registrations at once (``not_leader``).
- asks the gate too whenever the worker replaces leadership.json (inotify on
  the data directory), at the renew deadline itself, and at least every
  `LOOK_EVERY` (every `TICK` without inotify); once it says no, reads the lease to tell
  clients where the leader went (``leader_changed`` with the new leader's
  epoch/ip/port when a valid lease names another node with a higher epoch,
  else nulls), closes everything and exits 0.
- every `STATUS_EVERY` (1 s) writes ``DATA_DIR/relay.json`` (tmp + rename)::

      {"pid": 123, "epoch": 7, "listening": true, "updated": <monotonic>,
       "snapshot": RelayServer.snapshot()}

  and a last one with ``"listening": false`` on the way out.
- SIGTERM/SIGINT: ``leader_changed`` with nulls, exit 0 within 1 s.

Exit status: 0 after serving or when not leader at start; 1 if a port
cannot be bound; 2 on a configuration problem (one line each).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from relay.runner import serve


class Command(BaseCommand):
    help = "Run the relay's TCP listeners (JSON and passthrough) while this agent leads."
    requires_system_checks: list[str] = []  # config problems: one line each, in handle()

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--standby", action="store_true",
            help="start warm and wait: serve as soon as this agent leads and the fenced "
            "start_relay action of its epoch has run (DATA_DIR/relay.wanted)",
        )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        from django.conf import settings

        stk = settings.STK
        if stk.problems:
            for problem in stk.problems:
                self.stderr.write(f"runrelay: config {stk.source}: {problem.line()}")
            raise SystemExit(2)
        code = serve(stk, options["standby"], self._say, self._complain)
        if code:
            raise SystemExit(code)

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _complain(self, line: str) -> None:
        self.stderr.write(line)
        self.stderr.flush()
