"""Reading `stk.ini` and the environment into raw values (E001 unreadable, E002 no `[stk]`).

The file may be the site's own, headerless keys and all, written on Windows
(`stkrelay.config_ini`: encodings, inline comments, quotes, E110–E112); every
`STK_<KEY>` of the environment overrides it, `STK_INI` names it.

Where each key came from is kept (`FileValues.origins`: `line 4`, `[stk] line 9`,
`STK_KMSN`). Keys of the agent's table that stand only in a section it does not read
(not `[stk]`, not `[pool:<KMSN>]`, not before the first header) are never silently
dropped: `stkrelay.W110` names the section and each key's line, and a problem about such a
key (`KMSN is not set`) says where it stands (`elsewhere`). A file holding a secret that
group or others may read is `stkrelay.W111`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from dataclasses import dataclass, field

from stkconfig.keys import COMMAND_KEYS, DEFAULTS, SECRET_KEYS
from stkconfig.model import Problem
from stkconfig.said import Said, gettext_noop
from stkrelay import config_ini, config_legacy

SHOWN = 8  # sections, and keys of one section, named in one line
SECTION_PREFIX = "pool:"  # [pool:<KMSN>]: a watched pool (stkconfig.pools)
OTHERS_READ = stat.S_IRGRP | stat.S_IROTH


@dataclass
class FileValues:
    """What the file and the environment give, before any value is checked."""

    values: dict[str, str]  # the table's defaults, then the file's [stk] keys, then STK_<KEY>
    source: str  # the file's path, or "(environment)"
    problems: list[Problem] = field(default_factory=list)  # E001/E002/E110–E112
    warnings: list[Problem] = field(default_factory=list)  # W110/W111
    pools: dict[str, dict[str, str]] = field(default_factory=dict)  # [pool:<KMSN>] sections
    given: set[str] = field(default_factory=set)  # the keys the file itself gave
    origins: dict[str, str] = field(default_factory=dict)  # key -> "line 4", "[stk] line 9", "STK_KEY"
    elsewhere: dict[str, str] = field(default_factory=dict)  # key -> "[Agent] line 4", not read


def read(ini_path: str | None, env: dict[str, str], known: Collection[str] = ()) -> FileValues:
    """The raw values of `[stk]` and where they came from; `known`: every key the agent reads
    (the table's and the leader actions'), to tell ours from another program's in other sections."""
    got = FileValues(dict(DEFAULTS), "(environment)")
    path = ini_path or env.get("STK_INI")
    if path:
        got.source = path
        _read_file(path, got, set(known) | set(DEFAULTS))
    for key, value in env.items():  # every STK_<KEY>, also keys other modules read (VIP_*, AWS_*...)
        if key.startswith("STK_") and key != "STK_INI":
            got.values[key[4:]] = value.strip()
            got.origins[key[4:]] = key
    return got


def _read_file(path: str, got: FileValues, known: set[str]) -> None:
    try:
        ini, problems = config_ini.read(path, SECRET_KEYS, COMMAND_KEYS)  # the site's file as it is
    except OSError as exc:
        got.problems.append(Problem("stkrelay.E001", "STK_INI", f"cannot read {path}: {exc.strerror}",
                                    "point --ini or STK_INI at the agent's stk.ini"))  # fmt: skip
        return
    got.problems += problems
    if ini is None:
        return
    got.pools = pool_sections(ini)
    found = config_legacy.stk_values(ini)
    if found is None:
        got.problems.append(Problem(
            "stkrelay.E002", "[stk]",
            Said(gettext_noop("%(path)s has no [stk] section and no keys before a header; it has "
                              "%(sections)s"), path=path, sections=_sections_seen(ini)),
            Said(gettext_noop("put the keys under a [stk] header (or before any section header)")),
        ))  # fmt: skip
        return
    got.values.update({k: v for k, (v, _) in found.items()})
    got.given = set(found)
    got.origins.update({k: where for k, (_, where) in _origins(ini).items()})
    _elsewhere(ini, got, known)
    _secrets_at_rest(path, ini, got)


def pool_sections(ini: config_ini.IniFile) -> dict[str, dict[str, str]]:
    """The `[pool:<KMSN>]` sections of a read ini (`config_ini`: keys upper-cased, values read)."""
    out = {}
    for name, keys in ini.sections.items():
        if name != config_ini.TOP and name.lower().startswith(SECTION_PREFIX):
            out[name[len(SECTION_PREFIX) :].strip()] = {k: v for k, (v, _) in keys.items()}
    return out


def _origins(ini: config_ini.IniFile) -> dict[str, tuple[str, str]]:
    """key -> (value, where) for the keys the agent reads: the headerless ones, then `[stk]`."""
    out = {k: (v, f"line {n}") for k, (v, n) in ini.sections[config_ini.TOP].items()}
    for name in ini.named("stk"):
        out.update({k: (v, f"[{name}] line {n}") for k, (v, n) in ini.sections[name].items()})
    return out


def _elsewhere(ini: config_ini.IniFile, got: FileValues, known: set[str]) -> None:
    """W110 per section holding keys of ours that the file gives nowhere the agent reads."""
    read_here = {config_ini.TOP, *ini.named("stk")}
    for name, keys in ini.sections.items():
        if name in read_here or name.lower().startswith(SECTION_PREFIX):
            continue
        ours = {k: n for k, (_, n) in keys.items() if k in known and k not in got.given}
        if not ours:
            continue
        got.elsewhere.update({k: f"[{name}] line {n}" for k, n in ours.items()})
        listed = ", ".join(f"{k} (line {n})" for k, n in list(ours.items())[:SHOWN])
        got.warnings.append(Problem(
            "stkrelay.W110", f"[{name}]",
            Said(gettext_noop("holds %(keys)s, which the agent does not read there: it reads [stk] and the "
                              "keys before the first section header (here: %(read)s)"),
                 keys=listed + _more(ours), read=_read_from(ini)),
            Said(gettext_noop("move them under [stk] if they are the agent's (this section is left alone)")),
        ))  # fmt: skip


def _read_from(ini: config_ini.IniFile) -> str:
    """Where the agent took its keys: `3 keys before the first header, 9 in [STK] (line 4)`."""
    parts = []
    top = len(ini.sections[config_ini.TOP])
    if top:
        parts.append(f"{top} key{'s' if top != 1 else ''} before the first header")
    for name in ini.named("stk"):
        n = len(ini.sections[name])
        parts.append(f"{n} key{'s' if n != 1 else ''} in [{name}] (line {ini.lines[name]})")
    return ", ".join(parts)


def _sections_seen(ini: config_ini.IniFile) -> str:
    """`[Agent] (line 1: KMSN line 2, ...), [Printer] (line 9: PORT line 10)`, bounded."""
    seen = []
    for name, keys in list((n, k) for n, k in ini.sections.items() if n != config_ini.TOP)[:SHOWN]:
        listed = ", ".join(f"{k} line {n}" for k, (_, n) in list(keys.items())[:SHOWN])
        seen.append(f"[{name}] (line {ini.lines[name]}{': ' + listed + _more(keys) if keys else ''})")
    return ", ".join(seen) + (", ..." if len(ini.sections) - 1 > SHOWN else "") or "no section"


def _more(items: Collection[object]) -> str:
    return ", ..." if len(items) > SHOWN else ""


def _secrets_at_rest(path: str, ini: config_ini.IniFile, got: FileValues) -> None:
    """W111: a file holding a secret that group or others may read (issue 40, finding 10)."""
    held = sorted(
        {k for keys in ini.sections.values() for k, (v, _) in keys.items() if k in SECRET_KEYS and v}
    )
    if not held:
        return
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return  # it was just read: gone since, nothing to say about its mode
    if mode & OTHERS_READ:
        got.warnings.append(Problem(
            "stkrelay.W111", "STK_INI",
            Said(gettext_noop("%(path)s holds %(keys)s and is mode %(mode)s: other users of this machine "
                              "can read the secrets"), path=path, keys=", ".join(held), mode=f"{mode:04o}"),
            Said(gettext_noop("chmod 600 it (owned by the agent's user), or give the secrets as STK_<KEY>")),
        ))  # fmt: skip


def where_else(problem: Problem, elsewhere: dict[str, str]) -> Problem:
    """`problem`, saying where its key stands when the file has it only in a section the agent
    does not read (`KMSN: is not set` -> `... (it stands in [Agent] line 2, not read)`)."""
    where = elsewhere.get(problem.key)
    if where is None:
        return problem
    said = Said(gettext_noop("%(message)s (this file has %(key)s in %(where)s, a section the agent does "
                             "not read)"), message=problem.message, key=problem.key, where=where)  # fmt: skip
    return Problem(problem.id, problem.key, said, problem.hint)
