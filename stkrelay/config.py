"""Agent configuration: `stk.ini` section `[stk]`, overridden by `STK_<KEY>`, and the agent's own
`STK_*` environment variables: the loader.

The keys, their defaults, ranges and meanings are the table in `stkconfig.keys`; the result
is the frozen `stkconfig.model.Config`. `load()` reads the file (`stkrelay.config_file`,
`stkrelay.config_ini`: E001, E002, E110–E112, warnings W110–W111), the environment variables
(`stkconfig.environment`), then each section of `SECTIONS` in turn: one module each, one frozen
dataclass each, made by `parse(raw, known, bad)` (`stkconfig.raw`), its fields copied into
the `Config`. Most sections live in `stkconfig/` (identity, legacy, relay_keys, stations,
entry, timing, eligibility, gate, redis_url, web, log_keys, events, beacons, ownership, i18n,
actions, store); those that need a module stkconfig may not import are here for now
(`config_notify`: stkhost; `config_tls`: the web certificate; `config_cloud`: the wire's
cloud key; `config_exec`: the site relay's launcher).
Last come the places on disk (`_places`: the share's login E012/E022, the watched pools
`config_pools` E025–E027, the libraries a store needs, DATA_DIR E013/E241).

`load()` never raises for bad values: it returns the config and a list of `Problem`s, each
with a stable id, the key, and a hint. `runagent` (like `relayctl` and `runrelay`) refuses
to start on any problem and prints one line per problem; `manage.py check` shows the same
list as Django system checks. Nothing below the loader reads a raw value or the environment
(`tests/test_config_contract.py`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from elections.core.action_config import ACTION_DEFAULTS
from stkconfig import (
    actions,
    beacons,
    eligibility,
    entry,
    environment,
    events,
    gate,
    i18n,
    identity,
    legacy,
    log_keys,
    ownership,
    redis_url,
    relay_keys,
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
from stkconfig.parsed import SmbLogin
from stkconfig.raw import Raw
from stkconfig.smburl import SmbUrlError, is_smb, parse_smb_url, smb_password
from stkrelay import (
    config_cloud,
    config_exec,
    config_file,
    config_legacy,
    config_libraries,
    config_notify,
    config_pools,
    config_tls,
)
from stkrelay.django_said import django_translation

__all__ = ["ACTION_IDS", "DEFAULTS", "Config", "Problem", "load"]
said.translate_with(django_translation)  # a problem's words in the panel's language, once Django is up


class Section(Protocol):
    """A section's parser (`stkconfig.raw`): its frozen section, every bad value said."""

    def __call__(self, raw: Raw, known: Any, bad: Bad) -> object: ...


SECTIONS: tuple[Section, ...] = (
    identity.parse, legacy.parse, relay_keys.parse, stations.parse, entry.parse, timing.parse,
    eligibility.parse, gate.parse, config_notify.parse, redis_url.parse, web.parse, config_tls.parse,
    log_keys.parse, events.parse, config_cloud.parse, beacons.parse, config_exec.parse, ownership.parse,
    i18n.parse, actions.parse, store.parse,
)  # fmt: skip


def load(
    ini_path: str | None = None, env: dict[str, str] | None = None, check_dirs: bool | None = True
) -> Config:
    """The agent's configuration from `ini_path` (else `STK_INI`) and `env` (else this process's);
    `check_dirs`: look at LEASE_DIR and DATA_DIR on disk (None: unless `STK_SKIP_DIR_CHECKS=1`)."""
    env = dict(os.environ if env is None else env)
    known = set(DEFAULTS) | set(ACTION_DEFAULTS)
    got = config_file.read(ini_path, env, known)
    values, problems, pools = got.values, got.problems, got.pools
    cfg = draft()
    cfg.source, cfg.problems, cfg.warnings = got.source, problems, got.warnings
    cfg.origins = got.origins
    cfg.ignored = config_legacy.ignored_keys(got.given, known)

    def bad(pid: str, key: str, message: str, hint: str) -> None:
        problems.append(Problem(pid, key, message, hint))

    raw = Raw(values, env)
    take(cfg, environment.parse(raw, cfg, bad))  # first: STK_SKIP_DIR_CHECKS says whether to look at disk
    check_dirs = not cfg.environment.skip_dir_checks if check_dirs is None else check_dirs
    raw = replace(raw, check_dirs=check_dirs)

    for section in SECTIONS:  # in this order: each reads what those before it made (its Known)
        take(cfg, section(raw, cfg, bad))
    _places(cfg, raw, pools, bad)
    _unit_state(cfg, env, bad)
    cfg.problems = [config_file.where_else(p, got.elsewhere) for p in problems]
    return freeze(cfg)


def _places(cfg: Any, raw: Raw, pools: dict[str, dict[str, str]], bad: Bad) -> None:
    """Where the pool's share is and how it is logged into, the watched pools, and this agent's
    DATA_DIR: on disk when `check_dirs`."""
    values, check_dirs = raw.values, raw.check_dirs
    cfg.lease_dir = values["LEASE_DIR"]
    cfg.smb = SmbLogin(values["SMB_PASSWORD"], values["SMB_PASSWORD_FILE"])
    cfg.watched = config_pools.parse(pools, cfg.kmsn, cfg.node, cfg.lease_dir, cfg.share_timeout, bad)
    cfg.data_dir = values["DATA_DIR"] or str(Path.home() / ".stkrelay" / (cfg.node or "agent"))
    if is_smb(cfg.lease_dir):
        _check_smb(cfg.lease_dir, cfg.smb, bad)
    uses_smb = (cfg.lease_store == "file" and is_smb(cfg.lease_dir)) or any(
        is_smb(w.lease_dir) for w in cfg.watched
    )
    config_libraries.check_libraries(uses_smb, cfg.lease_store == "etcd", bad)
    if check_dirs and cfg.lease_store == "file" and not is_smb(cfg.lease_dir):  # etcd: nothing on a share
        hint = "mount the site's share and point LEASE_DIR at its socket folder (W:\\socket)"
        _check_dir(cfg.lease_dir, "LEASE_DIR", "stkrelay.E012", bad, hint)
    if check_dirs:
        try:
            Path(cfg.data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)  # this user's only
        except OSError:
            pass  # reported just below
        _check_dir(
            cfg.data_dir, "DATA_DIR", "stkrelay.E013", bad, "point DATA_DIR at a writable local folder"
        )


def _unit_state(cfg: Any, env: dict[str, str], bad: Bad) -> None:
    """Under systemd, DATA_DIR is the unit's state directory (one data folder: stkrelay.agent_data)."""
    from stkrelay.config_state import NOT_THE_UNITS_ID, not_the_units

    why = not_the_units(cfg.data_dir, env.get("STATE_DIRECTORY"))
    if why:
        state = env["STATE_DIRECTORY"].split(":")[0]
        hint = f"set DATA_DIR = {state} in the ini (relayctl and stkuser read it there too)"
        bad(NOT_THE_UNITS_ID, "DATA_DIR", why, hint)


def _check_smb(lease_dir: str, login: SmbLogin, bad: Bad) -> None:
    """An smb:// LEASE_DIR (E012) and its password (E022), without touching the
    network: the share is checked by `relayctl doctor` and by the agent itself."""
    try:
        url = parse_smb_url(lease_dir)
    except SmbUrlError as exc:
        bad("stkrelay.E012", "LEASE_DIR", str(exc), "use smb://[user@]host[:port]/share/folder")
        return
    try:
        password = smb_password(login)
    except SmbUrlError as exc:
        bad("stkrelay.E022", "SMB_PASSWORD_FILE", str(exc), "name a file this agent can read")
        return
    if url.user and not password:
        bad("stkrelay.E022", "SMB_PASSWORD", f"is not set for {url.user}@{url.host}",
            "set SMB_PASSWORD, or SMB_PASSWORD_FILE naming a file that holds it")  # fmt: skip


def _check_dir(path: str, key: str, pid: str, bad: Bad, hint: str) -> None:
    if not path:
        bad(pid, key, "is not set", hint)
        return
    if not os.path.isdir(path):
        bad(pid, key, f"{path} is not a directory", hint)
        return
    try:
        fd, probe = tempfile.mkstemp(prefix=".stk-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
        os.listdir(path)
    except OSError as exc:
        bad(pid, key, f"{path} is not readable and writable ({exc.strerror})", hint)
