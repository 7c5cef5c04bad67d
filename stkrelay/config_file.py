"""Reading `stk.ini` and the environment into raw values (E001 unreadable, E002 no `[stk]`).

The file may be the site's own, headerless keys and all (`stkrelay.config_legacy`);
every `STK_<KEY>` of the environment overrides it, `STK_INI` names it.
"""

from __future__ import annotations

import configparser

from stkconfig.keys import DEFAULTS
from stkconfig.model import Problem
from stkrelay import config_legacy, config_pools


def read(
    ini_path: str | None, env: dict[str, str]
) -> tuple[dict[str, str], str, list[Problem], dict[str, dict[str, str]], set[str]]:
    """The raw values of `[stk]` (the table's defaults, then the file, then every `STK_<KEY>`),
    where they came from, the problems of reading the file (E001/E002), its `[pool:<KMSN>]`
    sections, and the keys the file itself gave."""
    values = dict(DEFAULTS)
    problems: list[Problem] = []
    pools: dict[str, dict[str, str]] = {}
    given: set[str] = set()
    path = ini_path or env.get("STK_INI")
    source = "(environment)"
    if path:
        source = path
        try:
            parser = config_legacy.read_ini(path)  # the site's file as it is: headerless keys too
        except OSError as exc:
            problems.append(
                Problem(
                    "stkrelay.E001",
                    "STK_INI",
                    f"cannot read {path}: {exc.strerror}",
                    "point --ini or STK_INI at the agent's stk.ini",
                )
            )
        except configparser.Error as exc:
            problems.append(
                Problem(
                    "stkrelay.E001",
                    "STK_INI",
                    f"{path} is not a valid ini file: {str(exc).splitlines()[0]}",
                    "fix the file's syntax",
                )
            )
        else:
            pools = config_pools.sections(parser)
            found = config_legacy.stk_values(parser)
            if found is not None:
                values.update(found)
                given = set(found)
            else:
                problems.append(
                    Problem(
                        "stkrelay.E002",
                        "[stk]",
                        f"{path} has no [stk] section",
                        "put the keys under a [stk] header (or before any section header)",
                    )
                )
    for key, value in env.items():  # every STK_<KEY>, also keys other modules read (VIP_*, AWS_*...)
        if key.startswith("STK_") and key != "STK_INI":
            values[key[4:]] = value.strip()
    return values, source, problems, pools, given
