"""Watched pools: the `[pool:<KMSN>]` sections of `stk.ini` (docs/design.md §11); the `pools` section
(the file's sections are found by `stkrelay.config_file`).

An agent's panel can also show other KMSNs (an office server that mounts
several sites' shares). Each section names one pool:

| key | default | meaning |
|---|---|---|
| `LEASE_DIR` | — | that pool's share (a directory, or `smb://host/share/socket`) |
| `RELAY_TOKEN` | — | that pool's site secret |
| `POOL_KEY` | `RELAY_TOKEN` | what signs that pool's records; verifies them here |
| `SHARE_TIMEOUT` | the agent's | seconds one operation on that share may take |
| `NODE` | the agent's node | the name this agent's operator commands carry there |
| `SMB_*` | — | that share's own SMB settings (`SMB_PASSWORD`, `SMB_PASSWORD_FILE`...) |

The agent never contends in a watched pool: it reads the lease, the members'
heartbeats and the events, and writes only operator commands (drain, promote...)
as its own signed event lines there. Problems name the section and the key:
`stkrelay.E025` the section itself (not a KMSN, this agent's own pool, an
unknown key, too many sections), `stkrelay.E026` its secrets (`RELAY_TOKEN` /
`POOL_KEY` missing or weak), `stkrelay.E027` its values (`LEASE_DIR` unset or
this agent's own, `SHARE_TIMEOUT`, `NODE`). A share that is unreachable at
start-up is not a problem (it shows as unreachable on the panel, like one that
goes away later).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from stkconfig.bad import Bad
from stkconfig.keys import BY_NAME
from stkconfig.parsed import SmbLogin, WatchedPool
from stkconfig.raw import Raw
from stkconfig.smburl import SmbUrlError, is_smb, parse_smb_url, smb_password
from stkconfig.strength import SECRET_HINT, secret_weakness

SECTION, SECRET, VALUE = "stkrelay.E025", "stkrelay.E026", "stkrelay.E027"
KEYS = ("LEASE_DIR", "RELAY_TOKEN", "POOL_KEY", "SHARE_TIMEOUT", "NODE")
BACKEND_PREFIXES = ("SMB_",)  # handed to the share's backend as its options
MAX_POOLS = 500


@dataclass(frozen=True)
class Pools:
    watched: list[WatchedPool] = field(default_factory=list)  # the [pool:<KMSN>] sections


class PoolsNeed(Protocol):
    """What the watched pools read of the sections before them."""

    kmsn: str
    node: str
    share_timeout: float


def parse(raw: Raw, known: PoolsNeed, bad: Bad) -> Pools:
    """Every watched pool that is well configured (`raw.pools`); one line per problem (E025–E027)."""
    found = raw.pools
    return Pools(_watched(found, known.kmsn, known.node, raw.text("LEASE_DIR"), known.share_timeout, bad))


def _watched(
    found: Mapping[str, Mapping[str, str]], own_kmsn: str, own_node: str, own_lease_dir: str,
    share_timeout: float, bad: Bad,
) -> list[WatchedPool]:  # fmt: skip
    pools: list[WatchedPool] = []
    if len(found) > MAX_POOLS:
        bad(SECTION, "[pool:*]", f"{len(found)} watched pools, more than {MAX_POOLS}",
            "split the pools over several agents' panels")  # fmt: skip
        return pools
    for kmsn, values in found.items():
        where = f"[pool:{kmsn}]"

        def problem(key: str, message: str, hint: str, where: str = where) -> None:
            secret = key in ("RELAY_TOKEN", "POOL_KEY", "SMB_PASSWORD", "SMB_PASSWORD_FILE")
            pid = SECRET if secret else VALUE if key in KEYS else SECTION
            bad(pid, f"{where} {key}".strip(), message, hint)

        if not kmsn or any(c.isspace() or c in "/\\" for c in kmsn) or len(kmsn) > 64:
            problem("", "is not a KMSN", "name the section [pool:<KMSN>], e.g. [pool:1234-5678-90-12]")
        elif kmsn == own_kmsn:
            problem("", f"is this agent's own pool ({own_kmsn})", "watch other KMSNs only: remove it")
        else:
            pool = _section(kmsn, values, own_node, own_lease_dir, share_timeout, problem)
            if pool is not None:
                pools.append(pool)
    return pools


def _section(
    kmsn: str, values: Mapping[str, str], own_node: str, own_lease_dir: str, share_timeout: float,
    problem: Callable[[str, str, str], None],
) -> WatchedPool | None:  # fmt: skip
    """One `[pool:<KMSN>]` section's keys, every problem said; the pool when there is none."""
    ok = True
    for key in values:
        if key not in KEYS and not key.startswith(BACKEND_PREFIXES):
            problem(key, "is not a key of a watched pool", f"use {', '.join(KEYS)}")
            ok = False
    lease_dir = values.get("LEASE_DIR", "")
    if not lease_dir:
        problem("LEASE_DIR", "is not set", "point it at that site's share (its socket folder, or smb://...)")
        ok = False
    elif lease_dir == own_lease_dir:
        problem("LEASE_DIR", "is this agent's own LEASE_DIR", "each pool has its own share folder")
        ok = False
    elif is_smb(lease_dir):
        ok = _smb_ok(values, problem) and ok
    token = values.get("RELAY_TOKEN", "")
    key = values.get("POOL_KEY", "") or token
    if not key:
        problem("RELAY_TOKEN", "is missing", "set that pool's secret: it verifies the pool's signatures")
        ok = False
    for name in ("RELAY_TOKEN", "POOL_KEY"):
        why = secret_weakness(values.get(name, "")) if values.get(name) else ""
        if why:
            problem(name, why, SECRET_HINT)
            ok = False
    timeout = share_timeout
    if values.get("SHARE_TIMEOUT"):
        try:
            timeout = float(values["SHARE_TIMEOUT"])
        except ValueError:
            timeout = -1.0
        low, high = BY_NAME["SHARE_TIMEOUT"].range or (0.1, 60)
        if not low <= timeout <= high:
            text = values["SHARE_TIMEOUT"]
            problem("SHARE_TIMEOUT", f"{text!r} is not {low:g}..{high:g} seconds", "e.g. 2")
            ok = False
    node = values.get("NODE", "") or own_node
    if any(c.isspace() or c in "/\\" for c in node) or len(node) > 64:
        problem("NODE", f"{node[:64]!r} is not a node name", "e.g. OFFICE1")
        ok = False
    login = SmbLogin(values.get("SMB_PASSWORD", ""), values.get("SMB_PASSWORD_FILE", ""))
    return WatchedPool(kmsn, lease_dir, token, key, timeout, node, login) if ok else None


def _smb_ok(values: Mapping[str, str], problem: Callable[[str, str, str], None]) -> bool:
    """An smb:// share of a watched pool: its URL and its password (no network)."""
    try:
        url = parse_smb_url(values["LEASE_DIR"])
    except SmbUrlError as exc:
        problem("LEASE_DIR", str(exc), "use smb://[user@]host[:port]/share/folder")
        return False
    try:
        password = smb_password(SmbLogin(values.get("SMB_PASSWORD", ""), values.get("SMB_PASSWORD_FILE", "")))
    except SmbUrlError as exc:
        problem("SMB_PASSWORD_FILE", str(exc), "name a file this agent can read")
        return False
    if url.user and not password:
        problem("SMB_PASSWORD", f"is not set for {url.user}@{url.host}",
                "set SMB_PASSWORD, or SMB_PASSWORD_FILE naming a file that holds it")  # fmt: skip
        return False
    return True
