"""The cloud keys of `stk.ini` (docs/design.md §14): `CLOUD_URL` and `CLOUD_TOKEN`.

- `CLOUD_URL`: the cloud relay's tunnel, `tcp://host:port` (the one scheme
  built; `ws(s)://` parse but are refused for now, `stkrelay.E028`). Empty:
  no tunnel. A cloud of several `runcloud` nodes: a comma-separated list
  (``tcp://a:9542, tcp://b:9542``); the tunnel dials them in turn, the next
  one whenever a dial or a handshake fails, so a dead node's sites re-dial
  another (`relay.server.cloud_tunnel.TunnelClient`). One URL reads as before;
  `cfg.cloud` is the first, `cfg.clouds` all of them.
- `CLOUD_TOKEN`: this site's secret at the cloud, as strong as a site key
  (`stkconfig.strength.secret_weakness`: at least 16 characters, 6 distinct, not one
  short run repeated, not a placeholder) and neither `RELAY_TOKEN` nor
  `POOL_KEY` (the cloud must hold no site key, `stkrelay.E029`), nor the site's
  lease key K_cloud (`relayctl cloud-key`, `stkhost.pool_keys.cloud_key`): whoever holds
  the token would then sign leases the cloud believes (`stkrelay.E055`). Both keys or neither.

`parse(raw, known, bad)` (`stkconfig.raw`) reports each bad value through `bad`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from stkconfig.bad import Bad
from stkconfig.parsed import CloudURL
from stkconfig.raw import Raw
from stkconfig.strength import secret_weakness
from stkhost.pool_keys import cloud_key


@dataclass(frozen=True)
class Cloud:
    cloud_url: str = ""
    cloud_token: str = ""
    cloud: CloudURL | None = None  # CLOUD_URL parsed; None when no tunnel is wanted
    clouds: tuple[CloudURL, ...] = ()  # every URL of a comma-separated CLOUD_URL, cloud first


class CloudNeeds(Protocol):
    """What the cloud keys read of the sections before them."""

    kmsn: str
    relay_token: str
    pool_key: str


def parse_cloud_url(text: str) -> CloudURL | str:
    """The URL, or why it is not one (for the problem line)."""
    from urllib.parse import urlsplit

    try:
        url = urlsplit(text)
        port = url.port
    except ValueError as exc:
        return f"{text!r} is not a URL ({exc})"
    if url.scheme not in ("tcp", "ws", "wss"):
        return f"{text!r}: the scheme must be tcp, ws or wss"
    if not url.hostname:
        return f"{text!r} names no host"
    if url.scheme == "tcp" and port is None:
        return f"{text!r}: a tcp URL needs a port"
    default = 443 if url.scheme == "wss" else 80
    return CloudURL(url.scheme, url.hostname, port or default, url.path or "/")


def parse(raw: Raw, known: CloudNeeds, bad: Bad) -> Cloud:
    """`CLOUD_URL` and `CLOUD_TOKEN` (E028, E029, E055); with both sound, the tunnel's nodes."""
    url_text, token = raw.text("CLOUD_URL"), raw.text("CLOUD_TOKEN")
    if not url_text:
        if token:
            bad("stkrelay.E028", "CLOUD_URL", "is not set but CLOUD_TOKEN is",
                "set CLOUD_URL to the cloud relay's tunnel port, e.g. tcp://cloud.example:9542")  # fmt: skip
        return Cloud(url_text, token)
    urls = [parse_cloud_url(text.strip()) for text in url_text.split(",")]
    for parsed in urls:
        if isinstance(parsed, str):
            bad("stkrelay.E028", "CLOUD_URL", parsed,
                "e.g. tcp://cloud.example:9542 (several nodes: comma-separated)")  # fmt: skip
        elif parsed.scheme != "tcp":
            bad("stkrelay.E028", "CLOUD_URL", f"{parsed.scheme}:// tunnels are not supported yet",
                "use tcp://host:TUNNEL_PORT")  # fmt: skip
    sound = all(isinstance(u, CloudURL) and u.scheme == "tcp" for u in urls)
    if not token or secret_weakness(token):
        why = secret_weakness(token) if token else "is missing"
        bad("stkrelay.E029", "CLOUD_TOKEN", why,
            "set the CLOUD_TOKEN of this site's [site:<KMSN>] section in the cloud's cloud.ini (the same "
            "long random secret)")  # fmt: skip
    elif token in (known.relay_token, known.pool_key):
        bad("stkrelay.E029", "CLOUD_TOKEN", "is the same as RELAY_TOKEN or POOL_KEY",
            "the cloud must not hold a site key: choose a separate secret")  # fmt: skip
    elif known.pool_key and token.strip().lower() == cloud_key(known.pool_key, known.kmsn):
        bad("stkrelay.E055", "CLOUD_TOKEN", "is the site's lease key (relayctl cloud-key)",
            "then a CLOUD_TOKEN holder signs leases the cloud believes: choose another secret")  # fmt: skip
    elif sound:  # a tunnel only with both keys and every URL sound
        clouds = tuple(u for u in urls if isinstance(u, CloudURL))
        return Cloud(url_text, token, clouds[0], clouds)
    return Cloud(url_text, token)
