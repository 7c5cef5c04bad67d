"""The web-facing keys of `stk.ini` and the strength of the site's secrets: the `web` section.

Nothing that reaches the panel from the LAN is trusted by default:

- `WEB_ALLOWED_HOSTS` (comma list): names and addresses the panel answers to,
  besides `NODE_IP` and the loopback names (`allowed_hosts()`); any other
  `Host` header, and any other browser `Origin` on the WebSocket routes, is
  refused. Bad entries, and `*`, are `stkrelay.E019`.
- `WEB_TRUSTED_PROXIES` (comma list of addresses or CIDRs): the only direct
  peers whose `X-Forwarded-For` is believed. Bad entries are `stkrelay.E020`,
  as is the retired `STK_TRUST_FORWARDED_FOR` (it trusted any peer).
- `WEB_LOGIN_ADDRESS_FAILURES`, `WEB_LOGIN_FAILURES_PER_S`, `WEB_LOGIN_BURST`:
  the login throttle (`elections.web.throttle`); checked as numbers (E010/E011).
- `WEB_WS_MAX_BUFFER` (bytes, at least `RELAY_MAX_FRAME`: `stkrelay.E066`) and
  `WEB_WS_MAX_MESSAGES` (16..1,000,000: `stkrelay.E067`): what the web process
  holds for one WebSocket whose reader is slow before it closes it (`relay.web.ws_flow`).
- `RELAY_TOKEN` (and `POOL_KEY` when set) must be at least 16 characters and
  not trivially repetitive: `stkrelay.E018`.

`parse(raw, known, bad)` (`stkconfig.raw`) reports each bad value and leaves its default;
`allowed_hosts` makes Django's ALLOWED_HOSTS of the section (`stkrelay.settings`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from stkconfig.bad import Bad
from stkconfig.raw import Raw
from stkconfig.strength import SECRET_HINT, secret_weakness

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
WS_MAX_BUFFER = 4 << 20
WS_MAX_MESSAGES = 4096
_HOSTNAME = re.compile(r"^\.?[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.?$")


@dataclass(frozen=True)
class Web:
    web_allowed_hosts: list[str] = field(default_factory=list)  # WEB_ALLOWED_HOSTS only; see allowed_hosts()
    web_trusted_proxies: list[str] = field(default_factory=list)  # networks, e.g. "10.0.0.5/32"
    web_login_address_failures: int = 20  # failed logins per client address per STK_LOGIN_WINDOW_S
    web_login_failures_per_s: float = 0.5  # failed logins per second, all addresses together
    web_login_burst: int = 5  # ...with this many at once
    web_ws_max_buffer: int = WS_MAX_BUFFER
    web_ws_max_messages: int = WS_MAX_MESSAGES


class WebNeeds(Protocol):
    """What the web keys read of the sections before them."""

    relay_max_frame: int


def parse(raw: Raw, known: WebNeeds, bad: Bad) -> Web:
    """The panel's keys (E019, E020, E066, E067, E010/E011) and the site secrets' strength (E018)."""
    d = Web()
    check_secrets(raw.values, bad)
    hosts = parse_allowed_hosts(raw.text("WEB_ALLOWED_HOSTS"), bad)
    proxies = parse_trusted_proxies(raw.text("WEB_TRUSTED_PROXIES"), bad)
    check_retired_forwarded_for(raw.values, bad)
    per_address = raw.number("WEB_LOGIN_ADDRESS_FAILURES", bad) or d.web_login_address_failures
    rate = raw.number("WEB_LOGIN_FAILURES_PER_S", bad) or d.web_login_failures_per_s
    burst = raw.number("WEB_LOGIN_BURST", bad) or d.web_login_burst
    size, count = parse_ws_bounds(raw.values, known.relay_max_frame, bad)
    return Web(hosts, proxies, per_address, rate, burst, size, count)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def host_entry(ip: str) -> str:
    """An address as Django's ALLOWED_HOSTS spells it (IPv6 in brackets)."""
    return f"[{ip}]" if ":" in ip else ip


def parse_allowed_hosts(text: str, bad: Bad) -> list[str]:
    """WEB_ALLOWED_HOSTS: host names (a leading dot admits subdomains) or addresses."""
    hosts: list[str] = []
    for item in _items(text):
        entry = item.lower()
        if entry == "*":
            hint = "list the names and addresses people type to reach this panel"
            bad("stkrelay.E019", "WEB_ALLOWED_HOSTS", "'*' would let any Host in", hint)
            continue
        try:
            hosts.append(host_entry(str(ipaddress.ip_address(entry.strip("[]")))))
            continue
        except ValueError:
            pass
        if not _HOSTNAME.match(entry) or len(entry) > 253:
            hint = "a comma list such as panel.site.lan, .site.lan, 192.168.1.10 (no scheme, no port)"
            bad("stkrelay.E019", "WEB_ALLOWED_HOSTS", f"{item!r} is not a host name or an address", hint)
            continue
        hosts.append(entry.rstrip("."))
    return hosts


def allowed_hosts(node_ip: str, extra: list[str], vip: str = "", hostname: str = "") -> list[str]:
    """Django's ALLOWED_HOSTS: this agent's own address, loopback, its host name, the VIP
    (VIP_ADDRESS: clients follow the leader there), then WEB_ALLOWED_HOSTS. Never `*`."""
    hosts = [host_entry(node_ip), *LOOPBACK_HOSTS]
    name = hostname.lower().rstrip(".")
    if name and _HOSTNAME.match(name) and len(name) <= 253:
        hosts.append(name)
    try:
        hosts.append(host_entry(str(ipaddress.ip_address(vip.split("/", 1)[0].strip()))))
    except ValueError:
        pass  # no VIP, or a bad one (reported by the executors' checks)
    return list(dict.fromkeys([*hosts, *extra]))


def parse_ws_bounds(values: Mapping[str, str], max_frame: int, bad: Bad) -> tuple[int, int]:
    """WEB_WS_MAX_BUFFER (E066) and WEB_WS_MAX_MESSAGES (E067); the defaults where bad."""
    size, count = WS_MAX_BUFFER, WS_MAX_MESSAGES
    text = values.get("WEB_WS_MAX_BUFFER", "").strip()
    if text:
        if text.isdigit() and max_frame <= int(text) <= 1 << 30:
            size = int(text)
        else:
            hint = f"bytes, from RELAY_MAX_FRAME ({max_frame}) to {1 << 30}, e.g. {WS_MAX_BUFFER}"
            bad("stkrelay.E066", "WEB_WS_MAX_BUFFER", f"{text!r} is not a size that holds a frame", hint)
    text = values.get("WEB_WS_MAX_MESSAGES", "").strip()
    if text:
        if text.isdigit() and 16 <= int(text) <= 1_000_000:
            count = int(text)
        else:
            hint = f"a count from 16 to 1000000, e.g. {WS_MAX_MESSAGES}"
            bad("stkrelay.E067", "WEB_WS_MAX_MESSAGES", f"{text!r} is not 16..1000000 messages", hint)
    return max(size, max_frame), count


def parse_trusted_proxies(text: str, bad: Bad) -> list[str]:
    """WEB_TRUSTED_PROXIES: addresses or networks (CIDR), normalised ('10.0.0.1/32')."""
    nets: list[str] = []
    for item in _items(text):
        try:
            nets.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            hint = "a comma list of the reverse proxies in front of the panel, e.g. 10.0.0.5, 10.0.1.0/28"
            bad("stkrelay.E020", "WEB_TRUSTED_PROXIES", f"{item!r} is not an address or a network", hint)
    return nets


def check_retired_forwarded_for(values: Mapping[str, str], bad: Bad) -> None:
    """STK_TRUST_FORWARDED_FOR=N believed X-Forwarded-For from any peer: refuse it loudly."""
    value = values.get("TRUST_FORWARDED_FOR", "").strip()
    if value and value != "0":
        hint = "unset it and list the proxies' addresses in WEB_TRUSTED_PROXIES"
        bad("stkrelay.E020", "STK_TRUST_FORWARDED_FOR", "is no longer read (it trusted any peer)", hint)


def check_secrets(values: Mapping[str, str], bad: Bad) -> None:
    """RELAY_TOKEN (already reported by E004 when empty) and POOL_KEY when set."""
    for key in ("RELAY_TOKEN", "POOL_KEY"):
        secret = values.get(key, "")
        why = secret_weakness(secret) if secret else ""
        if why:
            bad("stkrelay.E018", key, why, SECRET_HINT)
