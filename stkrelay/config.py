"""Agent configuration: `stk.ini` section `[stk]`, overridden by `STK_<KEY>`.

The keys, their defaults, ranges and meanings are the table in `stkconfig.keys`;
the result is the frozen `stkconfig.model.Config`. This module reads the file and
runs the checks, in four parts: the pool's identity and ports (`_identity`), the
timing keys (`_timing`), what the agent serves (`_services`), and where the pool
and this agent keep their files (`_places`).

`load()` never raises for bad values: it returns the config and a list of
`Problem`s, each with a stable id, the key, and a hint. `runagent` (like
`relayctl` and `runrelay`) refuses to start on any problem and prints one line
per problem; `manage.py check` shows the same list as Django system checks.
The panel's keys (`WEB_ALLOWED_HOSTS`, `WEB_TRUSTED_PROXIES`, `WEB_LOGIN_*`)
and the secrets' strength are checked by `stkconfig.web` (E018–E020, E066, E067),
the panel's transport (`WEB_PLAIN`, `TLS_CERT`, `TLS_KEY`) by `stkrelay.config_tls` (E057–E061),
the beacon keys (`BEACON_*`) by `stkconfig.beacons` (E030–E032, E130);
the `[pool:<KMSN>]` sections of watched pools by `stkrelay.config_pools`
(E025–E027, `Config.watched`);
`LEASE_STORE` and the `ETCD_*` keys by `stkrelay.config_store` (E033–E036);
the timing keys and their ratios by `stkconfig.timing` (E007/E008, E100–E103), the
gate keys (`GATE_*`) by `stkconfig.gate` (E104–E108);
the notification keys (`ON_ROLE_CHANGE*`, `WEBHOOK_*`) by `stkrelay.config_notify` (E180–E183);
`RELAY_KIND`, `RELAY_EXEC`, `RELAY_EXEC_LISTEN` by `stkrelay.config_exec` (E070–E077);
the ownership keys (`OWNERSHIP_*`) by `stkconfig.ownership` (E120–E122);
the panel's `LANGUAGE_CODE` and `TIME_ZONE` by `stkconfig.i18n` (E150–E151);
`RELAY_HOST` (where this PC's stations dial) by `stkconfig.stations` (E113).
The file itself is read by `stkrelay.config_file` and `stkrelay.config_ini` (E001, E002,
E110–E112, and the warnings W110–W111, `Config.warnings`).

The leader-action keys (`VIP_*`, `AWS_*`, `OCI_*`, `AZURE_*`) are the `actions` section
(`stkconfig.actions`, E014–E017).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from elections.core.action_config import ACTION_DEFAULTS
from elections.ports.share.smburl import SmbUrlError, is_smb, parse_smb_url, smb_password
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
    timing,
    web,
)
from stkconfig.actions import ACTION_IDS
from stkconfig.bad import Bad
from stkconfig.keys import DEFAULTS
from stkconfig.model import Config, Problem, draft, freeze, take
from stkconfig.parsed import SmbLogin
from stkconfig.raw import Raw
from stkrelay import (
    config_cloud,
    config_exec,
    config_file,
    config_legacy,
    config_libraries,
    config_notify,
    config_pools,
    config_store,
    config_tls,
)
from stkrelay.django_said import django_translation

__all__ = ["ACTION_IDS", "DEFAULTS", "Config", "Problem", "load"]
said.translate_with(django_translation)  # a problem's words in the panel's language, once Django is up


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

    cfg.environment = environment.parse(env, bad)
    if check_dirs is None:
        check_dirs = not cfg.environment.skip_dir_checks

    raw = Raw(values, env, check_dirs)

    take(cfg, identity.parse(raw, cfg, bad))
    take(cfg, legacy.parse(raw, cfg, bad))
    take(cfg, relay_keys.parse(raw, cfg, bad))
    take(cfg, stations.parse(raw, cfg, bad))
    take(cfg, entry.parse(raw, cfg, bad))
    take(cfg, timing.parse(raw, cfg, bad))
    _leading(cfg, raw, bad)
    _services(cfg, raw, bad)
    _places(cfg, raw, pools, bad)
    _unit_state(cfg, env, bad)
    cfg.problems = [config_file.where_else(p, got.elsewhere) for p in problems]
    return freeze(cfg)


def _leading(cfg: Any, raw: Raw, bad: Bad) -> None:
    """What decides who leads besides the lease: priority, health, gate; and the notifications."""
    take(cfg, eligibility.parse(raw, cfg, bad))
    cfg.gate = gate.parse(raw, cfg, bad)
    cfg.notify = config_notify.parse(raw, cfg, bad)


def _services(cfg: Any, raw: Raw, bad: Bad) -> None:
    """Redis, the panel, logs and events, the cloud tunnel, beacons, an external relay, the
    leader's addresses and the panel's language and zone."""
    take(cfg, redis_url.parse(raw, cfg, bad))
    take(cfg, web.parse(raw, cfg, bad))
    take(cfg, config_tls.parse(raw, cfg, bad))
    take(cfg, log_keys.parse(raw, cfg, bad))
    take(cfg, events.parse(raw, cfg, bad))
    take(cfg, config_cloud.parse(raw, cfg, bad))
    take(cfg, beacons.parse(raw, cfg, bad))
    take(cfg, config_exec.parse(raw, cfg, bad))
    take(cfg, ownership.parse(raw, cfg, bad))
    take(cfg, i18n.parse(raw, cfg, bad))
    take(cfg, actions.parse(raw, cfg, bad))


def _places(cfg: Any, raw: Raw, pools: dict[str, dict[str, str]], bad: Bad) -> None:
    """The pool's store (a share or etcd), the watched pools, and this agent's DATA_DIR."""
    take(cfg, config_store.parse(raw, cfg, bad))
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
