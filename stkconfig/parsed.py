"""What some keys parse into: the typed parts of `Config` (`gate`, `notify`, `cloud`,
`relay_exec`, `watched`, `etcd`, `smb`). Pure values; the checks that make them are the
sections of `stkconfig` (one module per concern)."""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GATE_TIMEOUT = 1.0  # GATE_TIMEOUT's default, seconds


@dataclass(frozen=True)
class GateConfig:
    """`GATE_CMD` / `GATE_FILE` / `GATE_TIMEOUT` / `GATE_MAX_AGE` (stkconfig.gate)."""

    cmd: tuple[str, ...] = ()  # argv, never a shell
    file: str = ""
    timeout: float = GATE_TIMEOUT
    max_age: float = 0.0  # 0: a readable file counts whenever it was written

    @property
    def configured(self) -> bool:
        return bool(self.cmd or self.file)


@dataclass(frozen=True)
class NotifyConfig:
    """`ON_ROLE_CHANGE*` and `WEBHOOK_*` (stkconfig.notify)."""

    role_cmd: tuple[str, ...] = ()  # argv, never a shell
    role_timeout: float = 10.0
    webhook_url: str = ""
    webhook_secret: str = ""
    webhook_pins: frozenset[str] = frozenset()
    webhook_timeout: float = 5.0
    webhook_tries: int = 8
    webhook_queue: int = 1000
    webhook_security_every: float = 60.0

    @property
    def configured(self) -> bool:
        return bool(self.role_cmd or self.webhook_url)


@dataclass(frozen=True)
class CloudURL:
    """``CLOUD_URL`` parsed: ``tcp://host:port`` or ``ws(s)://host[:port]/path`` (stkconfig.cloud)."""

    scheme: str
    host: str
    port: int
    path: str = "/"


@dataclass(frozen=True)
class ExecRelay:
    """`RELAY_EXEC` split into words, and where that relay listens (loopback; stkconfig.relay_kind)."""

    argv: tuple[str, ...]  # each word may hold placeholders
    host: str
    port: int

    @property
    def passthrough_port(self) -> int:
        return self.port + 1

    @property
    def warm(self) -> bool:
        """May it run before its member leads (a warm standby)? Not if a word names ``{epoch}``:
        that is known only once this member wins."""
        return not any(
            name is not None and name.split(".")[0].split("[")[0] == "epoch"
            for word in self.argv
            for _, name, _, _ in string.Formatter().parse(word)
        )

    def command(self, *, epoch: int, kmsn: str) -> list[str]:
        """The words with every placeholder filled in, for one start."""
        values: Mapping[str, Any] = {
            "host": self.host, "port": self.port, "passthrough_port": self.passthrough_port,
            "epoch": epoch, "kmsn": kmsn,
        }  # fmt: skip
        return [word.format_map(values) for word in self.argv]


@dataclass(frozen=True)
class SmbLogin:
    """`SMB_PASSWORD` / `SMB_PASSWORD_FILE`: how an `smb://` lease dir's user logs in (the file is
    read when the share is opened: `stkconfig.smburl.smb_password`)."""

    password: str = ""
    password_file: str = ""


@dataclass(frozen=True)
class EtcdSettings:
    """`ETCD_*` with `LEASE_STORE = etcd` (stkconfig.store), and the `LEASE_POLL` an etcd pool
    falls back on while its watch is down."""

    endpoints: tuple[str, ...] = ()  # normalised http(s)://host:port
    prefix: str = ""  # "": /stkrelay/<KMSN>/
    ca: str = ""
    cert: str = ""
    key: str = ""
    poll: float = 2.0


@dataclass(frozen=True)
class WatchedPool:
    """One `[pool:<KMSN>]` section, checked (stkconfig.pools)."""

    kmsn: str
    lease_dir: str
    relay_token: str
    pool_key: str
    share_timeout: float
    node: str
    smb: SmbLogin = field(default_factory=SmbLogin)  # the section's SMB_PASSWORD(_FILE)

    # `PoolPlace.of()` reads the same attribute names as on the agent's own Config.
    @property
    def lease_store(self) -> str:
        return "file"
