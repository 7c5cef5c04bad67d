"""The typed configuration: `Config` (frozen) and `Problem` (one bad value)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Any

from elections.core.action_config import ActionConfig
from stkconfig.beacons import BEACON_INTERVAL
from stkconfig.environment import EnvironmentSettings
from stkconfig.i18n import LANGUAGE
from stkconfig.parsed import (
    CloudURL,
    EtcdSettings,
    ExecRelay,
    GateConfig,
    NotifyConfig,
    SmbLogin,
    WatchedPool,
)


@dataclass(frozen=True)
class Problem:
    id: str  # stable: stkrelay.E0xx (a warning: stkrelay.W1xx)
    key: str
    message: str
    hint: str

    def line(self) -> str:
        return f"{self.key}: {self.message} ({self.id}) — {self.hint}"


@dataclass(frozen=True)
class Config:
    """The agent's configuration, typed and frozen: one attribute per key of the table
    (`LEASE_TTL` → `lease_ttl`), and what some keys parse into. Made by
    `stkrelay.config.load`; pass it to what needs it."""

    kmsn: str = ""
    station: str = ""
    node: str = ""
    node_ip: str = "127.0.0.1"
    relay_port: int = 9530
    relay_token: str = ""
    pool_key: str = ""  # signs every pool record (lease, lock, members, events, audit chain)
    share_timeout: float = 2.0
    lease_dir: str = ""
    lease_store: str = "file"  # or etcd
    etcd: EtcdSettings = field(default_factory=EtcdSettings)  # LEASE_STORE = etcd: ETCD_* (config_store)
    smb: SmbLogin = field(default_factory=SmbLogin)  # an smb:// LEASE_DIR's SMB_PASSWORD(_FILE)
    lease_ttl: float = 10.0
    lease_renew: float = 3.0
    lease_poll: float = 2.0
    renew_deadline: float = 7.0
    web_port: int = 8000
    redis_url: str = "redis://127.0.0.1:6379/0"
    data_dir: str = ""
    relay_max_frame: int = 1 << 20
    relay_keepalive: float = 10.0
    heartbeat_ttl: float = 10.0
    promotion_hold: float = 5.0
    lease_watch: float = 0.25
    priority: int = 50
    health_cmd: str = ""
    health_url: str = ""
    gate: GateConfig = field(default_factory=GateConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    relay_attests: bool = True
    web_allowed_hosts: list[str] = field(default_factory=list)  # WEB_ALLOWED_HOSTS only; see allowed_hosts()
    web_trusted_proxies: list[str] = field(default_factory=list)  # networks, e.g. "10.0.0.5/32"
    web_login_address_failures: int = 20  # failed logins per client address per STK_LOGIN_WINDOW_S
    web_login_failures_per_s: float = 0.5  # failed logins per second, all addresses together
    web_login_burst: int = 5  # ...with this many at once
    web_plain: bool = False  # plain HTTP instead of HTTPS (stkconfig/panel_transport.py)
    tls_cert: str = ""  # the operator's certificate; "" with HTTPS: the one made in DATA_DIR
    tls_key: str = ""
    web_ws_max_buffer: int = 4 << 20  # see stkconfig.web.parse_ws_bounds
    web_ws_max_messages: int = 4096
    relay_station_keys_only: bool = False
    relay_max_per_address: int = 0
    relay_loopback: str = "auto"  # auto | on | off (relay.server.listen_set)
    relay_forward: str = "loopback"  # loopback | lan | off (relay.server.station_door)
    relay_host: str = ""  # where this PC's stations dial (the old agent's RELAY_HOST; relayctl doctor)
    relay_legacy: bool = (
        False  # old stations on the built-in relay (stkrelay.config_legacy, relay.wire.legacy)
    )
    relay_legacy_magic: str = ""
    relay_legacy_wait: float = 0.3
    entry: bool = (
        False  # ENTRY: the router's port-forward reaches this member (config_entry, relay.server.entry)
    )
    entry_listen: tuple[str, int] | None = None  # ENTRY_LISTEN parsed
    log_format: str = "text"
    log_max_bytes: int = 10 << 20
    log_backups: int = 5
    events_segment_bytes: int = 1 << 20
    events_keep_bytes: int = 4 << 20
    events_keep_days: float = 400.0
    cloud_url: str = ""
    cloud_token: str = ""
    cloud: CloudURL | None = None  # CLOUD_URL parsed; None when no tunnel is wanted
    clouds: tuple[CloudURL, ...] = ()  # each URL of a comma list CLOUD_URL, cloud first (stkconfig.cloud)
    beacon_interval: float = BEACON_INTERVAL
    beacon_port: int = 9532
    beacon_peers: list[str] = field(default_factory=list)
    relay_kind: str = "builtin"  # or exec (stkconfig/relay_kind.py)
    relay_exec: ExecRelay | None = None  # with exec and sound keys: the command and its loopback address
    ownership_check: float = 2.0  # seconds between looks at the addresses; 0 = off (stkconfig.ownership)
    ownership_hold: float = 10.0
    ownership_repair: bool = True
    language_code: str = LANGUAGE
    time_zone: str = "UTC"
    site_time_zone: str = ""  # a site command's TZ: TIME_ZONE if the ini sets it, else the agent's start's
    environment: EnvironmentSettings = field(default_factory=EnvironmentSettings)  # STK_DEBUG... (no ini key)
    source: str = "(defaults)"
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)  # said at start and by check; stop nothing (W1xx)
    origins: dict[str, str] = field(default_factory=dict)  # key -> where the file or environment gave it
    actions: ActionConfig = field(default_factory=ActionConfig)  # VIP_*, AWS_*, OCI_*, AZURE_* (E014–E017)
    watched: list[WatchedPool] = field(default_factory=list)  # the [pool:<KMSN>] sections (stkconfig.pools)
    ignored: list[str] = field(default_factory=list)  # keys of the file nobody reads (the old agent's own)


def draft() -> Any:
    """A mutable stand-in for a `Config` at its defaults, for the loader to fill in."""
    return SimpleNamespace(**{
        f.name: f.default_factory() if callable(f.default_factory) else f.default
        for f in fields(Config)
    })  # fmt: skip


def freeze(filled: Any) -> Config:
    """The `Config` a filled-in `draft()` describes."""
    return Config(**{f.name: getattr(filled, f.name) for f in fields(Config)})


def take(filled: Any, section: object) -> None:
    """Copy a parsed section's fields (named as `Config`'s) into a `draft()` being filled in."""
    for name, value in vars(section).items():
        setattr(filled, name, value)
