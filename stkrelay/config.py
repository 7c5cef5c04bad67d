"""Agent configuration: `stk.ini` section `[stk]`, overridden by `STK_<KEY>`, and the agent's own
`STK_*` environment variables: the loader.

The keys, their defaults, ranges and meanings are the table in `stkconfig.keys`; the result
is the frozen `stkconfig.model.Config`. `load()` reads the file (`stkrelay.config_file`,
`stkrelay.config_ini`: E001, E002, E110–E112, warnings W110–W111), the environment variables
(`stkconfig.environment`), then each section of `SECTIONS` in turn: one module each, one frozen
dataclass each, made by `parse(raw, known, bad)` (`stkconfig.raw`), its fields copied into
the `Config`. Every section lives in `stkconfig/` (identity, legacy, relay_keys, stations,
entry, timing, eligibility, gate, notify, redis_url, web, panel_transport, log_keys, events,
cloud, beacons, relay_kind, ownership, i18n, actions, store, pools, places).

`load()` never raises for bad values: it returns the config and a list of `Problem`s, each
with a stable id, the key, and a hint. `runagent` (like `relayctl` and `runrelay`) refuses
to start on any problem and prints one line per problem; `manage.py check` shows the same
list as Django system checks. Nothing below the loader reads a raw value or the environment
(`tests/test_config_contract.py`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Protocol

from elections.core.action_config import ACTION_DEFAULTS
from stkconfig import (
    actions,
    beacons,
    cloud,
    eligibility,
    entry,
    environment,
    events,
    gate,
    i18n,
    identity,
    legacy,
    log_keys,
    notify,
    ownership,
    panel_transport,
    places,
    pools,
    redis_url,
    relay_keys,
    relay_kind,
    said,
    stations,
    store,
    timing,
    web,
)
from stkconfig.actions import ACTION_IDS
from stkconfig.bad import Bad
from stkconfig.keys import DEFAULTS
from stkconfig.model import Config, Problem, draft, freeze, take
from stkconfig.raw import Raw
from stkrelay import config_file, config_legacy
from stkrelay.django_said import django_translation

__all__ = ["ACTION_IDS", "DEFAULTS", "Config", "Problem", "load"]
said.translate_with(django_translation)  # a problem's words in the panel's language, once Django is up


class Section(Protocol):
    """A section's parser (`stkconfig.raw`): its frozen section, every bad value said."""

    def __call__(self, raw: Raw, known: Any, bad: Bad) -> object: ...


SECTIONS: tuple[Section, ...] = (
    identity.parse, legacy.parse, relay_keys.parse, stations.parse, entry.parse, timing.parse,
    eligibility.parse, gate.parse, notify.parse, redis_url.parse, web.parse, panel_transport.parse,
    log_keys.parse, events.parse, cloud.parse, beacons.parse, relay_kind.parse, ownership.parse,
    i18n.parse, actions.parse, store.parse, pools.parse, places.parse,
)  # fmt: skip


def load(
    ini_path: str | None = None, env: dict[str, str] | None = None, check_dirs: bool | None = True
) -> Config:
    """The agent's configuration from `ini_path` (else `STK_INI`) and `env` (else this process's);
    `check_dirs`: look at LEASE_DIR and DATA_DIR on disk (None: unless `STK_SKIP_DIR_CHECKS=1`)."""
    env = dict(os.environ if env is None else env)
    known = set(DEFAULTS) | set(ACTION_DEFAULTS)
    got = config_file.read(ini_path, env, known)
    problems = got.problems
    cfg = draft()
    cfg.source, cfg.problems, cfg.warnings = got.source, problems, got.warnings
    cfg.origins = got.origins
    cfg.ignored = config_legacy.ignored_keys(got.given, known)

    def bad(pid: str, key: str, message: str, hint: str) -> None:
        problems.append(Problem(pid, key, message, hint))

    raw = Raw(got.values, env, pools=got.pools)
    take(cfg, environment.parse(raw, cfg, bad))  # first: STK_SKIP_DIR_CHECKS says whether to look at disk
    check_dirs = not cfg.environment.skip_dir_checks if check_dirs is None else check_dirs
    raw = replace(raw, check_dirs=check_dirs)

    for section in SECTIONS:  # in this order: each reads what those before it made (its Known)
        take(cfg, section(raw, cfg, bad))
    cfg.problems = [config_file.where_else(p, got.elsewhere) for p in problems]
    return freeze(cfg)
