"""cloud.ini's keys for a cloud of several nodes (issue 26 part 3; `relay.cloud.cluster`).

In ``[cloud]``, all or none:

- ``ETCD_ENDPOINTS``: the etcd members, ``http(s)://host:port`` comma-separated.
  Empty (the default): one node alone, no directory, as before.
- ``NODE_ID``: this node's name in the directory (letters, digits, ``._-``, at
  most 64).
- ``NODES``: every node's peer address, ``id=host:port`` comma-separated, this
  one included. A directory entry naming a node not listed here is not
  evidence: its clients are never forwarded to an address read from etcd.
- ``PEER_PORT``: where this node takes the remote clients other nodes forward
  to it (default ``RELAY_PORT + 4``).
- ``PEER_TOKEN``: the secret the nodes prove to each other on a forwarded
  connection, as strong as a site key.
- ``ETCD_PREFIX`` (default ``/stkrelay-cloud/``), ``ETCD_TIMEOUT`` (seconds per
  etcd call, default 1), ``DIRECTORY_TTL`` (the etcd lease of an entry, whole
  seconds, default 2: a dead node's sites are claimable elsewhere that long
  after its last keep-alive).

Problems: ``stkrelay.E230`` endpoints, ``E231`` NODE_ID, ``E232`` NODES,
``E233`` PEER_TOKEN, ``E234`` a number out of range, ``E235`` no etcd library,
``E236`` PEER_PORT collides, ``E237`` a cluster key without ETCD_ENDPOINTS.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from stkconfig.model import Problem
from stkconfig.strength import secret_weakness

NODE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DEFAULT_PREFIX = "/stkrelay-cloud/"
CLUSTER_KEYS = ("NODE_ID", "NODES", "PEER_PORT", "PEER_TOKEN", "ETCD_PREFIX", "ETCD_TIMEOUT", "DIRECTORY_TTL")


@dataclass
class Cluster:
    endpoints: list[str]
    node: str
    nodes: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> peer address
    peer_port: int = 9544
    peer_token: str = ""
    prefix: str = DEFAULT_PREFIX
    timeout: float = 1.0
    ttl: int = 2


def parse_nodes(text: str) -> dict[str, tuple[str, int]]:
    """``id=host:port, ...`` -> {id: (host, port)}; ValueError names a bad item."""
    out: dict[str, tuple[str, int]] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, _, address = item.partition("=")
        host, _, port = address.strip().rpartition(":")
        name = name.strip()
        if not NODE_ID.fullmatch(name) or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item!r} is not id=host:port")
        if name in out:
            raise ValueError(f"{name} is listed twice")
        out[name] = (host.strip("[]"), int(port))
    if not out:
        raise ValueError("no node listed")
    return out


def cluster_config(values: dict[str, str], relay_port: int, bad: Callable[[Problem], None]) -> Cluster | None:
    text = values.get("ETCD_ENDPOINTS", "")
    if not text:
        stray = [k for k in CLUSTER_KEYS if values.get(k)]
        if stray:
            bad(Problem("stkrelay.E237", stray[0], "is set, ETCD_ENDPOINTS is not: a node alone has no peers",
                        "set ETCD_ENDPOINTS (the directory's etcd), or remove the cluster keys"))  # fmt: skip
        return None
    from stkconfig.etcd_endpoints import parse_endpoints

    ok = True
    try:
        endpoints = parse_endpoints(text)
    except ValueError as exc:
        bad(
            Problem(
                "stkrelay.E230", "ETCD_ENDPOINTS", str(exc), "e.g. http://10.0.0.5:2379, http://10.0.0.6:2379"
            )
        )
        endpoints, ok = [], False
    if importlib.util.find_spec("etcd3gw") is None:
        bad(Problem("stkrelay.E235", "ETCD_ENDPOINTS", "the etcd client library (etcd3gw) is not installed",
                    "install stkrelay with its etcd extra: pip install 'stkrelay[etcd]'"))  # fmt: skip
        ok = False
    node = values.get("NODE_ID", "")
    if not NODE_ID.fullmatch(node):
        bad(Problem("stkrelay.E231", "NODE_ID", f"{node[:80]!r} is not a node name" if node else "is not set",
                    "letters, digits, . _ - (at most 64): this node's name in the directory"))  # fmt: skip
        ok = False
    nodes: dict[str, tuple[str, int]] = {}
    try:
        nodes = parse_nodes(values.get("NODES", ""))
    except ValueError as exc:
        bad(Problem("stkrelay.E232", "NODES", str(exc), "e.g. a=10.0.0.1:9544, b=10.0.0.2:9544 (every node)"))
        ok = False
    if nodes and NODE_ID.fullmatch(node) and node not in nodes:
        bad(Problem("stkrelay.E232", "NODES", f"does not list this node ({node})",
                    "list every node, this one too"))  # fmt: skip
        ok = False
    token = values.get("PEER_TOKEN", "")
    weak = secret_weakness(token)
    if weak:
        bad(Problem("stkrelay.E233", "PEER_TOKEN", weak, "the same long random secret on every node"))
        ok = False

    out_of_range: list[str] = []

    def number(key: str, kind: type, default: float, low: float, high: float) -> float:
        raw = values.get(key, "")
        try:
            value = kind(raw) if raw else default
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            bad(Problem("stkrelay.E234", key, f"{raw!r} is not a number in {low:g}..{high:g}",
                        f"use {low:g}..{high:g} (default {default:g})"))  # fmt: skip
            out_of_range.append(key)
            return default
        return value

    peer_port = int(number("PEER_PORT", int, relay_port + 4, 1, 65535))
    timeout = number("ETCD_TIMEOUT", float, 1.0, 0.1, 30)
    ttl = int(number("DIRECTORY_TTL", int, 2, 1, 60))
    prefix = values.get("ETCD_PREFIX", "") or DEFAULT_PREFIX
    if not prefix.endswith("/"):
        prefix += "/"
    if not ok or out_of_range:
        return None
    return Cluster(endpoints, node, nodes, peer_port, token, prefix, timeout, ttl)
