"""`stkrelay health`: is the agent on this host up? For a container's HEALTHCHECK.

Reads the agent's own configuration (STK_INI or STK_* keys, as the agent does)
without Django, asks its `/healthz` (docs/design.md §10) on `NODE_IP:WEB_PORT` and exits
0 when the answer is 200 with `"status": "up"`, 1 otherwise (503, refused, a
timeout, a body that is not the agent's). The certificate is not checked: the
probe sends no secret and believes only a yes, so a stranger on the port can at
worst make a dead agent look dead. Standard library only: it runs every 30 s.
"""

from __future__ import annotations

import json
import ssl
import sys
import urllib.error
import urllib.request

from stkrelay import config

TIMEOUT = 4.0  # under the HEALTHCHECK's --timeout
MAX_BODY = 4096  # /healthz answers a few dozen bytes


def url_of(cfg: config.Config) -> str:
    scheme = "http" if cfg.web_plain else "https"
    host = f"[{cfg.node_ip}]" if ":" in cfg.node_ip else cfg.node_ip
    return f"{scheme}://{host}:{cfg.web_port}/healthz"


def probe(url: str, timeout: float = TIMEOUT) -> tuple[bool, str]:
    """(up, what was seen) for the agent's /healthz at `url`."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    refused: int | None = None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=insecure) as answer:
            body = answer.read(MAX_BODY)
    except urllib.error.HTTPError as exc:  # a 503 "down" carries its reason (waiting for Redis)
        refused = exc.code
        try:
            body = exc.read(MAX_BODY)
        except OSError:
            body = b""
    except (OSError, ValueError) as exc:
        return False, f"no answer ({exc.__class__.__name__})"
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or doc.get("status") not in ("up", "down"):
        return False, f"HTTP {refused}" if refused is not None else "not the agent's answer"
    if refused is not None or doc.get("status") != "up":
        reason = doc.get("reason")
        shown = isinstance(reason, str) and reason.isprintable() and len(reason) <= 80
        return False, f"down ({reason})" if shown else "down"
    return True, f"up ({doc.get('role', '?')})"


def main(argv: list[str]) -> int:
    if argv:
        print("usage: stkrelay health    (exit 0 when this host's agent is up)", file=sys.stderr)
        return 2
    cfg = config.load(check_dirs=False)
    up, seen = probe(url_of(cfg))
    print(f"{url_of(cfg)}: {seen}")
    return 0 if up else 1
