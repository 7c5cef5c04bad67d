"""Console entry points of an installed stkrelay (pyproject.toml `[project.scripts]`).

    stkrelay agent --ini PATH          one agent in the foreground (as `manage.py runagent`)
    stkrelay manage COMMAND [ARGS]     any management command (migrate, check, runrelay, ...)
    stkrelay cloud --ini cloud.ini     the cloud rendezvous relay (`manage.py runcloud`, docs/design.md §14)
    stkrelay health [--ini PATH]       exit 0 when this host's agent answers /healthz "up" (HEALTHCHECK)
    relayctl ARGS | relayclient ARGS | stkuser ARGS    as `manage.py relayctl ARGS`, ...

Each one sets DJANGO_SETTINGS_MODULE and takes `--ini PATH` anywhere on its
command line (else `STK_INI`; for relayctl, relayclient and stkuser, else the one `*.ini`
in /etc/stkrelay/ when there is exactly one); the path is made absolute before Django reads
settings, so they work from any directory; `stkrelay cloud` takes `--ini PATH` (else
`CLOUD_INI`) as the cloud's own cloud.ini, not an agent's. `python -m stkrelay ...` is the
same as `stkrelay ...`.
"""

from __future__ import annotations

import os
import sys

from stkrelay.ini_arg import take_ini

ETC = "/etc/stkrelay"  # where README "Install on a site" puts each instance's ini
OPERATOR_COMMANDS = ("relayctl", "relayclient", "stkuser")
USAGE = """usage: stkrelay agent [--ini PATH]        run one agent (web, worker, beat, relay while leader)
       stkrelay manage COMMAND [ARGS...]  run a management command with the agent's settings
       stkrelay cloud [--ini cloud.ini]   run the cloud rendezvous relay (else $CLOUD_INI)
       stkrelay health [--ini PATH]       exit 0 when this host's agent is up (a container HEALTHCHECK)
       stkrelay files                     where the units, dashboard, alert rules and example ini are
       stkrelay install-units [--dest DIR]  copy the two systemd units (default /etc/systemd/system)
       stkrelay --version                 stkrelay's version
also: relayctl, relayclient, stkuser (each takes --ini PATH, else $STK_INI, else the one
      ini in /etc/stkrelay/)"""


def default_ini(etc: str = ETC) -> str | None:
    """The one `*.ini` in /etc/stkrelay/ (README "Install on a site"), else None (none, or several:
    which one is meant is the operator's to say)."""
    try:
        found = sorted(e.path for e in os.scandir(etc) if e.name.endswith(".ini") and e.is_file())
    except OSError:
        return None
    return found[0] if len(found) == 1 else None


def run(command: str, argv: list[str], prog: str | None = None) -> int:
    """`manage.py COMMAND ARGV` with the agent's settings, from any directory."""
    argv = take_ini(argv)
    installed = default_ini() if not os.environ.get("STK_INI") and command in OPERATOR_COMMANDS else None
    if installed:
        os.environ["STK_INI"] = installed
    if os.environ.get("STK_INI"):  # relative to where it was given, not to DATA_DIR (runagent's cwd)
        os.environ["STK_INI"] = os.path.abspath(os.environ["STK_INI"])
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        os.environ["DJANGO_SETTINGS_MODULE"] = "stkrelay.settings"
    if command in ("relayctl", "stkuser"):  # no agent database here: say where, create nothing
        from stkrelay.agent_data import precheck

        code = precheck(command, argv)
        if code is not None:
            return code
    from django.core.management import execute_from_command_line

    try:
        try:
            execute_from_command_line([prog or command, command, *argv])
        finally:
            sys.stdout.flush()
    except BrokenPipeError:  # `relayctl list -o yaml | head`: the reader has gone, as with any filter
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 141  # as a shell reports a command ended by SIGPIPE
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("--version", "version"):
        from stkrelay.operator_command import stkrelay_version

        print(f"stkrelay {stkrelay_version()}")
        return 0
    sub, rest = args[0], args[1:]
    if sub == "agent":  # the agent's supervisor loads no Django (issue 41)
        from elections.management.agent_root import main as runagent

        return runagent(rest)
    if sub == "manage" and rest:
        return run(rest[0], rest[1:], "stkrelay manage")
    if sub in ("files", "install-units"):
        from stkrelay import site_files

        return (site_files.files_main if sub == "files" else site_files.install_units_main)(rest)
    if sub == "health":
        from stkrelay import health_probe

        return health_probe.main(take_ini(rest))
    if sub == "cloud":
        agent_ini = os.environ.pop("STK_INI", None)  # the cloud reads no agent's stk.ini
        rest = take_ini(rest)
        if os.environ.get("STK_INI"):
            os.environ["CLOUD_INI"] = os.environ.pop("STK_INI")
        if agent_ini is not None and not os.environ.get("CLOUD_INI"):
            os.environ["CLOUD_INI"] = ""  # never fall back on the agent's file
        return run("runcloud", rest, "stkrelay cloud")
    print(USAGE, file=sys.stderr)
    return 2


def relayctl() -> int:
    return run("relayctl", sys.argv[1:])


def relayclient() -> int:
    return run("relayclient", sys.argv[1:])


def stkuser() -> int:
    return run("stkuser", sys.argv[1:])
