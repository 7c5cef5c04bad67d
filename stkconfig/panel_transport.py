"""The panel's transport keys: HTTPS by default, plain HTTP only when asked.

- `TLS_CERT`, `TLS_KEY`: the operator's certificate (PEM, leaf first, then any
  intermediates) and its unencrypted private key. Both or neither
  (`stkrelay.E057`); the certificate must be PEM (`E058`), the key PEM and the
  certificate's own (`E059`), as a TLS server loads them (`stkhost.pem_pair`).
  Without them the agent makes its own self-signed certificate in DATA_DIR at
  first start (`elections.ports.local.webcert`); when that cannot be written,
  `runagent` stops with `E061`.
- `WEB_PLAIN` (default 0): 1 serves the panel, API and WebSockets in plain HTTP.
  Meant for loopback (a local reverse proxy in front, tests); on a LAN address
  every page then carries a warning banner (`plain_on_lan`), and the start-up
  line says so. With `TLS_CERT` too it is a contradiction (`E060`).

`parse(raw, known, bad)` (`stkconfig.raw`) reports each bad value through `bad`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw
from stkhost.pem_pair import check_pair

PAIR_HINT = "set both TLS_CERT and TLS_KEY (PEM files this agent can read), or neither for a self-signed one"


@dataclass(frozen=True)
class PanelTransport:
    web_plain: bool = False  # plain HTTP instead of HTTPS
    tls_cert: str = ""  # the operator's certificate; "" with HTTPS: the one made in DATA_DIR
    tls_key: str = ""


def parse(raw: Raw, known: object, bad: Bad) -> PanelTransport:
    """`WEB_PLAIN`, `TLS_CERT`, `TLS_KEY` as given, after the checks above (the files read only
    when the disk is looked at)."""
    web_plain = raw.flag("WEB_PLAIN", False)
    cert, key = _check(raw.text("TLS_CERT"), raw.text("TLS_KEY"), web_plain, raw.check_dirs, bad)
    return PanelTransport(web_plain, cert, key)


def _check(cert: str, key: str, web_plain: bool, read_files: bool, bad: Bad) -> tuple[str, str]:
    if bool(cert) != bool(key):
        missing = "TLS_KEY" if cert else "TLS_CERT"
        bad("stkrelay.E057", missing, f"is not set but {'TLS_CERT' if cert else 'TLS_KEY'} is", PAIR_HINT)
        return cert, key
    if cert and web_plain:
        bad("stkrelay.E060", "WEB_PLAIN", "is 1 but TLS_CERT is set: plain HTTP or HTTPS?",
            "unset WEB_PLAIN to serve HTTPS with TLS_CERT, or unset TLS_CERT")  # fmt: skip
        return cert, key
    if cert and read_files:
        which, why = check_pair(cert, key)
        if which:
            pid = "stkrelay.E058" if which == "TLS_CERT" else "stkrelay.E059"
            bad(pid, which, why, "give the PEM certificate (leaf first) and its unencrypted PEM key")
    return cert, key


def plain_on_lan(node_ip: str, web_plain: bool) -> bool:
    """True when passwords and session cookies would cross the LAN in clear."""
    try:
        return web_plain and not ipaddress.ip_address(node_ip).is_loopback
    except ValueError:
        return web_plain
