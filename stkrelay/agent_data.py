"""Where an agent keeps its data, and what the operator commands say when it is not there.

One place names the folder: the ini's `DATA_DIR` (the systemd unit does not set it; under
the unit it must be the unit's state directory, `/var/lib/stkrelay/<instance>`, which
systemd passes as `$STATE_DIRECTORY`: stkrelay.E241 otherwise). `relayctl` and `stkuser`
read the same line; run before the agent ever started there, or with the wrong ini, they
say which database they looked for and where the unit keeps it (stkrelay.E240) before Django
starts, so nothing is created in a folder that is not the agent's: no empty database, no
`secret_key`, no folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

DATABASE = "stkrelay.sqlite3"
UNIT_STATE = "/var/lib/stkrelay/<instance>"  # stkrelay@.service's StateDirectory=stkrelay/%i
MISSING_ID = "stkrelay.E240"
# The actions that read the agent's database or views; the others (help, credentials, the dry
# run, doctor, which reports the same itself) need only the ini.
NEEDS_DATA = {
    "relayctl": {"list", "history", "drain", "undrain", "promote", "pause", "resume", "unbind", "forget"},
    "stkuser": {"add", "role", "passwd", "token", "revoke", "disable", "enable", "list"},
}


def database(data_dir: str) -> Path:
    return Path(data_dir) / DATABASE


def missing_database(data_dir: str, source: str | None) -> str | None:
    """The line that says no agent database is where this ini says, or None when it is there."""
    path = database(data_dir)
    if path.is_file():
        return None
    candidates = _units_databases()
    found = (" Found: " + ", ".join(candidates) + ".") if candidates else ""
    return (
        f"no agent database at {path} (DATA_DIR of {source or 'the defaults: no ini given'}) "
        f"({MISSING_ID}) — start the agent with this ini first, or point --ini at the ini of a running "
        f"agent; under systemd the unit keeps its data in {UNIT_STATE} (its StateDirectory), and the "
        f"ini's DATA_DIR must name that folder.{found}"
    )


def _units_databases() -> list[str]:
    try:
        return sorted(str(p) for p in Path("/var/lib/stkrelay").glob(f"*/{DATABASE}") if p.is_file())
    except OSError:
        return []


def command_action(argv: list[str]) -> str | None:
    """The action of an operator command line: its first word that is not an option."""
    takes_value = {"-o", "--output", "-n", "--reason", "--epoch", "--kind", "--role", "--label",
                   "--password-file", "-w", "--watch"}  # fmt: skip
    args = iter(argv)
    for arg in args:
        if arg in takes_value:
            next(args, None)
        elif arg in ("-h", "--help"):
            return None
        elif not arg.startswith("-"):
            return arg
    return None


def precheck(command: str, argv: list[str]) -> int | None:
    """Before Django starts: exit 3 with one line when `command`'s action needs the agent's
    database and the ini's DATA_DIR holds none; None to go on (config problems are said by
    the command itself, as always)."""
    if command_action(argv) not in NEEDS_DATA.get(command, ()):
        return None
    from stkrelay import config

    stk = config.load(check_dirs=False)
    if stk.problems:
        return None
    why = missing_database(stk.data_dir, stk.source)
    if why is None:
        return None
    print(f"{command}: {why}", file=sys.stderr)
    return 3
