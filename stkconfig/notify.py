"""The notification keys of `stk.ini` (`elections.runtime.notify`): the `notify` section.

- `ON_ROLE_CHANGE`: a command (split like a shell would, `shlex`, run without
  one) this agent runs when its own role changes, as keepalived's `notify` and
  Patroni's `on_role_change`: `CMD ROLE EPOCH KMSN NODE CAUSE`, and the same in
  `STK_ROLE`, `STK_EPOCH`, `STK_KMSN`, `STK_NODE`, `STK_CAUSE`. Its program must
  exist (`stkrelay.E180`).
- `ON_ROLE_CHANGE_TIMEOUT` (seconds, default 10, 0.1..600): then its process
  group is killed and an audit row written.
- `WEBHOOK_URL`: an http:// or https:// URL with a host (`stkrelay.E181`) that
  receives a signed JSON POST of every event of `notify.WEBHOOK_KINDS`.
- `WEBHOOK_SECRET`, or `WEBHOOK_SECRET_FILE` (its first line): the HMAC-SHA256
  key of the `X-Stkrelay-Signature` header; required with `WEBHOOK_URL`, at
  least 16 characters (`stkrelay.E182`).
- `WEBHOOK_PINS` (comma list of SHA-256 fingerprints): an https receiver is
  accepted only with one of these certificates; empty: the system's CAs. Only
  with an https URL (`stkrelay.E183`).
- `WEBHOOK_TIMEOUT` (seconds, default 5, 0.1..120), `WEBHOOK_TRIES` (default 8,
  1..100), `WEBHOOK_QUEUE` (events waiting, default 1000, 1..100000: when full
  the oldest is dropped and counted).
- `WEBHOOK_SECURITY_EVERY` (seconds, default 60, 1..3600): security events (refusals
  this agent counted) are coalesced: the first is posted at once, then at most one
  event per this many seconds carries every refusal counted meanwhile.

`parse(raw, known, bad)` (`stkconfig.raw`) reports each bad value and leaves its default.
"""

from __future__ import annotations

import shlex
import shutil
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from stkconfig.bad import Bad
from stkconfig.parsed import NotifyConfig
from stkconfig.raw import Raw
from stkhost.fingerprints import parse_pins  # not pinned_https: no http.client in every process
from stkhost.secret_source import SecretUnreadable, read_secret

MIN_SECRET = 16


def _or(value: float | int | None, default: float | int) -> float | int:
    return default if value is None else value


@dataclass(frozen=True)
class Notify:
    notify: NotifyConfig = field(default_factory=NotifyConfig)


def parse(raw: Raw, known: object, bad: Bad) -> Notify:
    """`Config.notify`: the role-change command and the webhook (E180–E183, E010/E011)."""
    return Notify(_notify(raw, bad))


def _notify(raw: Raw, bad: Bad) -> NotifyConfig:
    values = raw.values

    def number(key: str) -> float | int | None:
        return raw.number(key, bad)

    argv: tuple[str, ...] = ()
    text = values.get("ON_ROLE_CHANGE", "")
    if text:
        try:
            argv = tuple(shlex.split(text))
        except ValueError as exc:
            bad("stkrelay.E180", "ON_ROLE_CHANGE", f"{text!r} cannot be split into words ({exc})",
                "quote it as a shell would; it runs without one")  # fmt: skip
        if argv and shutil.which(argv[0]) is None:
            bad("stkrelay.E180", "ON_ROLE_CHANGE", f"{argv[0]!r} is not an executable program",
                "name the program by its absolute path, e.g. /usr/local/bin/stk-role-changed")  # fmt: skip
            argv = ()
    url = _url(values.get("WEBHOOK_URL", ""), bad)
    secret = _secret(values, bool(url), bad)
    pins: frozenset[str] = frozenset()
    pin_text = [p.strip() for p in values.get("WEBHOOK_PINS", "").split(",") if p.strip()]
    if pin_text:
        try:
            pins = parse_pins(pin_text)
        except ValueError as exc:
            bad(
                "stkrelay.E183",
                "WEBHOOK_PINS",
                str(exc),
                "give the receiver's SHA-256 certificate fingerprints",
            )
        if url and not url.startswith("https://"):
            bad("stkrelay.E183", "WEBHOOK_PINS", "is set but WEBHOOK_URL is not https://",
                "use an https:// WEBHOOK_URL, or remove WEBHOOK_PINS")  # fmt: skip
    return NotifyConfig(
        role_cmd=argv,
        role_timeout=float(_or(number("ON_ROLE_CHANGE_TIMEOUT"), 10.0)),
        webhook_url=url,
        webhook_secret=secret,
        webhook_pins=pins,
        webhook_timeout=float(_or(number("WEBHOOK_TIMEOUT"), 5.0)),
        webhook_tries=int(_or(number("WEBHOOK_TRIES"), 8)),
        webhook_queue=int(_or(number("WEBHOOK_QUEUE"), 1000)),
        webhook_security_every=float(_or(number("WEBHOOK_SECURITY_EVERY"), 60.0)),
    )


def _url(text: str, bad: Bad) -> str:
    if not text:
        return ""
    try:
        parts = urllib.parse.urlsplit(text)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        ok = False
    if not ok:
        bad("stkrelay.E181", "WEBHOOK_URL", f"{text!r} is not an http:// or https:// URL with a host",
            "e.g. https://chat.example.net/hooks/stkrelay")  # fmt: skip
        return ""
    return text


def _secret(values: Mapping[str, str], needed: bool, bad: Bad) -> str:
    secret = values.get("WEBHOOK_SECRET", "")
    path = values.get("WEBHOOK_SECRET_FILE", "")
    if not secret and path:
        try:
            secret = read_secret(path, "WEBHOOK_SECRET_FILE")
        except SecretUnreadable as exc:
            bad("stkrelay.E182", "WEBHOOK_SECRET_FILE", str(exc), "name a file this agent can read")
            return ""
    if needed and len(secret) < MIN_SECRET:
        bad("stkrelay.E182", "WEBHOOK_SECRET", "is missing or under 16 characters (WEBHOOK_URL is set)",
            "set WEBHOOK_SECRET_FILE to a file holding a long random key (openssl rand -hex 32)")  # fmt: skip
    return secret
