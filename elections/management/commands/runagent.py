"""`python manage.py runagent --ini PATH`: one agent in the foreground (`elections.management.agent_root`).

`manage.py runagent` and `stkrelay agent` go to the agent's root before Django is
loaded; this command is the way in for everything else that runs management
commands (`stkrelay manage runagent`, `call_command`): it execs the same root,
so the supervisor never keeps the Django this process loaded (issue 41).
"""

from __future__ import annotations

import os
import sys

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run one stkrelay agent (web, lease worker with beat, relay while leader)."
    requires_system_checks: list[str] = []  # config problems: one line each, from the root

    def add_arguments(self, parser):
        parser.add_argument("--ini", help="the agent's stk.ini (default: $STK_INI)")

    def handle(self, *args, **options):
        ini = options.get("ini")
        argv = ["--ini", os.path.abspath(ini)] if ini else []
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "elections.management.agent_root", *argv])
