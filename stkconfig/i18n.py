"""The panel's language and time zone: `LANGUAGE_CODE` and `TIME_ZONE` of `stk.ini`, the
`i18n` section.

- `LANGUAGE_CODE`: the panel's language when the browser asks for none the panel
  speaks (`Accept-Language`) and the user chose none (`elections.web.language`):
  `en` or `zh-hant` (Traditional Chinese, Taiwan usage); `zh-TW`, `zh_TW`,
  `zh-Hant-TW` are read as `zh-hant`. Anything else is `stkrelay.E150`.
- `TIME_ZONE`: the zone every time of the panel is shown in (an IANA name such as
  `Asia/Taipei`); default: this server's own zone (`/etc/localtime`, `TZ`), else
  UTC. A name the zone database does not know is `stkrelay.E151`.

`parse(raw, known, bad)` (`stkconfig.raw`) reports each bad value and leaves its default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from stkconfig.bad import Bad
from stkconfig.raw import Raw

LANGUAGE = "en"  # LANGUAGE_CODE's default
LANGUAGES = ("en", "zh-hant")
DEFAULT_LANGUAGE = LANGUAGE
_ALIASES = {"zh-tw": "zh-hant", "zh_tw": "zh-hant", "zh-hant-tw": "zh-hant", "zh_hant": "zh-hant",
            "en-us": "en", "en_us": "en", "en-gb": "en"}  # fmt: skip


@dataclass(frozen=True)
class PanelLocale:
    language_code: str = LANGUAGE
    time_zone: str = "UTC"
    site_time_zone: str = ""  # a site command's TZ: TIME_ZONE if the ini sets it, else the agent's start's


def parse(raw: Raw, known: object, bad: Bad) -> PanelLocale:
    """LANGUAGE_CODE and TIME_ZONE, and the TZ of the site's own commands (`processes.SITE_TZ`)."""
    text = raw.text("TIME_ZONE")
    zone = _time_zone(text, bad, raw.env)
    return PanelLocale(
        _language(raw.text("LANGUAGE_CODE"), bad), zone, zone if text.strip() else raw.env.get("TZ", "")
    )


def _language(text: str, bad: Bad) -> str:
    """LANGUAGE_CODE, normalised to one of LANGUAGES (E150; the default when bad or empty)."""
    code = text.strip().lower()
    if not code:
        return DEFAULT_LANGUAGE
    code = _ALIASES.get(code, code)
    if code in LANGUAGES:
        return code
    bad("stkrelay.E150", "LANGUAGE_CODE", f"{text!r} is not a language of the panel",
        "use en or zh-hant (Traditional Chinese)")  # fmt: skip
    return DEFAULT_LANGUAGE


def server_zone(env: Mapping[str, str], localtime: Path = Path("/etc/localtime")) -> str:
    """This machine's zone as an IANA name: TZ (of `env`), else the /etc/localtime link, else UTC."""
    tz = env.get("TZ", "").lstrip(":").strip()
    if tz and _known(tz):
        return tz
    try:
        target = os.readlink(localtime)
    except OSError:
        return "UTC"
    parts = Path(target).parts
    if "zoneinfo" in parts:
        name = "/".join(parts[parts.index("zoneinfo") + 1 :])
        if _known(name):
            return "UTC" if name in ("Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu") else name
    return "UTC"


def _known(name: str) -> bool:
    if name in available_timezones():
        return True
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return "/" in name or name.upper() == "UTC"


def _time_zone(text: str, bad: Bad, env: Mapping[str, str]) -> str:
    """TIME_ZONE: an IANA zone name (E151); empty: the server's zone."""
    name = text.strip()
    if not name:
        return server_zone(env)
    if name.upper() == "UTC":
        return "UTC"
    if _known(name):
        return name
    bad("stkrelay.E151", "TIME_ZONE", f"{text!r} is not a time zone of the zone database",
        "an IANA name such as Asia/Taipei or Europe/Berlin (empty: this server's zone)")  # fmt: skip
    return server_zone(env)
