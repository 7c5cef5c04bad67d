"""The grammar of an etcd endpoint list (`ETCD_ENDPOINTS` of stk.ini, the cloud's `cloud.ini`):
a comma list of `http(s)://host:port`, normalised."""

from __future__ import annotations

from urllib.parse import urlsplit


def parse_endpoints(text: str) -> list[str]:
    """`http(s)://host:port` items of a comma list, normalised; ValueError names a bad one."""
    out = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
            raise ValueError(f"{item!r} is not http(s)://host:port")
        if parts.path not in ("", "/") or parts.query or parts.username:
            raise ValueError(f"{item!r} must be only scheme://host:port")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        out.append(f"{parts.scheme}://{host}:{parts.port}")
    if not out:
        raise ValueError("no endpoint given")
    return out
