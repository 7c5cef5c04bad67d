"""The variables the agent reads from its environment alone (`STK_DEBUG`, `STK_SESSION_AGE`...):
the key table's `environment` rows, parsed once by the loader into `EnvironmentSettings`.

They are not keys of `stk.ini` (the file never sets them; an `STK_<KEY>` of a `[stk]` key is
read with the file, by `stkrelay.config_file`). A flag is on only as `1`; an empty number is
unset (its default); a number that is none is `stkrelay.E010` and leaves its default.
`STK_INI` (which file) is the loader's own (`stkrelay.config_file`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stkconfig.bad import Bad
from stkconfig.raw import Raw

SESSION_AGE = 8 * 3600
LOGIN_RESERVE_RATE = 0.2
LOGIN_RESERVE_BURST = 10
LOGIN_DEVICE_DAYS = 30


@dataclass(frozen=True)
class EnvironmentSettings:
    """One field per `environment` row of the key table (`STK_DEBUG` -> `debug`), but `STK_INI`."""

    secret_key: str = ""  # "": the panel's own, kept in DATA_DIR/secret_key (stkrelay.settings)
    debug: bool = False
    session_age: int = SESSION_AGE
    secure_cookies: bool = False
    login_reserve_rate: float = LOGIN_RESERVE_RATE
    login_reserve_burst: int = LOGIN_RESERVE_BURST
    login_device_days: int = LOGIN_DEVICE_DAYS
    public_leader_lookup: bool = False
    skip_dir_checks: bool = False


@dataclass(frozen=True)
class Environment:
    environment: EnvironmentSettings = field(default_factory=EnvironmentSettings)


def parse(raw: Raw, known: object, bad: Bad) -> Environment:
    """The agent's environment variables (`raw.env`), typed; a bad number said through `bad` (E010)."""
    return Environment(_settings(raw, bad))


def _settings(raw: Raw, bad: Bad) -> EnvironmentSettings:
    env = raw.env

    def flag(name: str) -> bool:
        return env.get(name) == "1"

    def number(name: str, kind: type[int] | type[float], default: float) -> float:
        text = env.get(name, "")
        if not text:
            return default
        try:
            return kind(text)
        except ValueError:
            bad("stkrelay.E010", name, f"{text!r} is not a number", f"set {name} to a number")
            return default

    return EnvironmentSettings(
        secret_key=env.get("STK_SECRET_KEY", ""),
        debug=flag("STK_DEBUG"),
        session_age=int(number("STK_SESSION_AGE", int, SESSION_AGE)),
        secure_cookies=flag("STK_SECURE_COOKIES"),
        login_reserve_rate=float(number("STK_LOGIN_RESERVE_RATE", float, LOGIN_RESERVE_RATE)),
        login_reserve_burst=int(number("STK_LOGIN_RESERVE_BURST", int, LOGIN_RESERVE_BURST)),
        login_device_days=int(number("STK_LOGIN_DEVICE_DAYS", int, LOGIN_DEVICE_DAYS)),
        public_leader_lookup=flag("STK_PUBLIC_LEADER_LOOKUP"),
        skip_dir_checks=flag("STK_SKIP_DIR_CHECKS"),
    )
