"""`--ini PATH` anywhere on a command line: the entry points' (`stkrelay.cli`) and the agent's
(`elections.management.agent_root`, which `stkrelay agent` runs) one reading of it."""

from __future__ import annotations

import os


def take_ini(argv: list[str]) -> list[str]:
    """Remove `--ini PATH` / `--ini=PATH` from `argv`; point STK_INI at the absolute path."""
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--ini" or arg.startswith("--ini="):
            path = arg.partition("=")[2] if "=" in arg else next(args, "")
            if not path:
                raise SystemExit("--ini needs a PATH")
            os.environ["STK_INI"] = os.path.abspath(path)
        elif arg == "--":  # the rest is not ours to read
            rest.append(arg)
            rest.extend(args)
        else:
            rest.append(arg)
    return rest
