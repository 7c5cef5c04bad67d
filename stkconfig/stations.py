"""`RELAY_HOST`: where this PC's stations dial (issue 36); the `stations` section.

The site's stations read `RELAY_HOST` from the same `stk.ini` and dial `RELAY_HOST:9530`,
then `127.0.0.1` (seed 000 §2). The agent never dials it; it reads the key to say where
the stations will go (`relayctl doctor`): `127.0.0.1` (this PC's agent, which forwards
to whoever leads) or a member's address reach the elected relay; any other address is the
old central relay, still the single point of failure. `stkrelay.E113`: a value that is
neither an IP address nor a host name.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw
from stkconfig.said import Said, gettext_noop

LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


@dataclass(frozen=True)
class Stations:
    relay_host: str = ""  # where this PC's stations dial (the old agent's RELAY_HOST; relayctl doctor)


def parse(raw: Raw, known: object, bad: Bad) -> Stations:
    return Stations(relay_host(raw.text("RELAY_HOST"), bad))


def relay_host(text: str, bad: Bad) -> str:
    """The address or host name the stations dial ("" when unset), else E113 and ""."""
    text = text.strip()
    if not text or is_host(text):
        return text
    said = Said(gettext_noop("%(value)r is neither an IP address nor a host name"), value=text[:80])
    hint = Said(gettext_noop("127.0.0.1: this PC's stations reach the elected relay through this PC's agent"))
    bad("stkrelay.E113", "RELAY_HOST", said, hint)
    return ""


def is_host(text: str) -> bool:
    """An IP address, or a host name of letters, digits and hyphens (RFC 1123)."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    name = text.removesuffix(".")
    return 0 < len(name) <= 253 and all(LABEL.fullmatch(label) for label in name.split("."))
