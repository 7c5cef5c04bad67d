"""The base of the operator commands (relayctl, relayclient, stkuser): Django's management
command without Django's clutter.

Their help shows their own options and `--ini PATH` (read by `stkrelay.cli` before Django
starts), not `--settings/--pythonpath/--traceback/...` (still accepted, not shown); their
usage reads `relayctl ...`, not `relayctl relayctl ...`; `--version` is stkrelay's.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils.translation import gettext_lazy as _

DJANGO_OPTIONS = {"--verbosity", "--settings", "--pythonpath", "--traceback", "--no-color", "--force-color",
                  "--skip-checks"}  # fmt: skip


def stkrelay_version() -> str:
    """The installed package's version (pyproject.toml), else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stkrelay")
    except PackageNotFoundError:  # a source checkout run as `python manage.py`
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, ValueError):
            return "unknown"


def console_prog(prog: str) -> str:
    """`relayctl`, not `relayctl relayctl`: the console script's name said once (also what a
    command's sub-commands are prefixed with, made while Django's `relayctl relayctl` stands)."""
    first, _sep, rest = prog.partition(" ")
    return first if rest == first else prog


class OperatorCommand(BaseCommand):
    suppressed_base_arguments = DJANGO_OPTIONS
    help: str
    requires_system_checks: list[str] = []

    def get_version(self) -> str:
        return f"stkrelay {stkrelay_version()}"

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        self.help = str(self.help)  # a lazy translation, in the operator's language now
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.prog = console_prog(parser.prog)
        parser.add_argument("--ini", metavar="PATH", help=_("the agent's stk.ini (else $STK_INI)"))
        return parser

    def execute(self, *args: Any, **options: Any) -> Any:
        """`--ini` is read by `stkrelay.cli` before Django starts; one that reached this parser came
        by `python manage.py` after the settings were read: refused unless it names that same file."""
        ini = options.get("ini")
        if ini and os.path.abspath(ini) != os.path.abspath(os.environ.get("STK_INI") or ""):
            why = _("--ini is read before the settings: use the console script, or STK_INI=%(path)s")
            raise CommandError(why % {"path": os.path.abspath(ini)})
        return super().execute(*args, **options)
