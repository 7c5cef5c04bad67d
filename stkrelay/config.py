"""Agent configuration: `stk.ini` section `[stk]`, overridden by `STK_<KEY>`.

`load()` never raises for bad values: it returns the config and a list of
`Problem`s, each with a stable id, the key, and a hint. `runagent` (like
`relayctl` and `runrelay`) refuses to start on any problem and prints one line
per problem; `manage.py check` shows the same list as Django system checks.
The panel's keys (`WEB_ALLOWED_HOSTS`, `WEB_TRUSTED_PROXIES`, `WEB_LOGIN_*`)
and the secrets' strength are checked by `stkrelay.config_web` (E018–E020),
the panel's transport (`WEB_PLAIN`, `TLS_CERT`, `TLS_KEY`) by `stkrelay.config_tls` (E057–E061),
the beacon keys (`BEACON_*`) by `stkrelay.config_beacons` (E030–E032);
the `[pool:<KMSN>]` sections of watched pools by `stkrelay.config_pools`
(E025–E027, `Config.watched`);
`LEASE_STORE` and the `ETCD_*` keys by `stkrelay.config_store` (E033–E036);
the ratios between the timing keys by `stkrelay.config_timing` (E100–E103), the
gate keys (`GATE_*`) by `stkrelay.config_gate` (E104–E108);
the notification keys (`ON_ROLE_CHANGE*`, `WEBHOOK_*`) by `stkrelay.config_notify` (E180–E183);
`RELAY_KIND`, `RELAY_EXEC`, `RELAY_EXEC_LISTEN` by `stkrelay.config_exec` (E070–E077);
the ownership keys (`OWNERSHIP_*`) by `stkrelay.config_ownership` (E120–E122);
the panel's `LANGUAGE_CODE` and `TIME_ZONE` by `stkrelay.config_i18n` (E150–E151).

The leader-action keys (`VIP_*`, `AWS_*`, `OCI_*`, `AZURE_*`) are read by
`elections.core.actions.action_config`; its problems come back here with one id
per executor family (`ACTION_IDS`), so a bad address stops start-up instead of
leaving that executor silently off.
"""

from __future__ import annotations

import configparser
import ipaddress
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from elections.core.actions import ACTION_DEFAULTS, action_config
from elections.ports.smburl import SmbUrlError, is_smb, parse_smb_url, smb_password
from stkrelay import (
    config_beacons,
    config_cloud,
    config_entry,
    config_gate,
    config_i18n,
    config_legacy,
    config_libraries,
    config_notify,
    config_ownership,
    config_pools,
    config_store,
    config_timing,
    config_tls,
    config_web,
)
from stkrelay.config_cloud import CloudURL
from stkrelay.config_exec import ExecRelay, check_exec
from stkrelay.config_gate import GateConfig
from stkrelay.config_notify import NotifyConfig
from stkrelay.config_pools import WatchedPool

DEFAULTS: dict[str, str] = {
    "KMSN": "",
    "STATION": "",
    "NODE": "",
    "NODE_IP": "127.0.0.1",
    "RELAY_PORT": "9530",
    "RELAY_TOKEN": "",
    "LEASE_DIR": "",
    "LEASE_TTL": "10",
    "LEASE_RENEW": "3",
    "LEASE_POLL": "2",
    "RENEW_DEADLINE": "7",
    "WEB_PORT": "8000",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "DATA_DIR": "",
    "RELAY_MAX_FRAME": str(1 << 20),
    "RELAY_KEEPALIVE": "10",
    "HEARTBEAT_TTL": "",  # default: LEASE_TTL
    "PROMOTION_HOLD": "5",
    "LEASE_WATCH": "0.25",
    "PRIORITY": "50",
    "HEALTH_CMD": "",
    "HEALTH_URL": "",
    "GATE_CMD": "",  # the VRRP-master signal (ADR 0011): a command, exit 0 = master...
    "GATE_FILE": "",  # ...or a file holding MASTER / BACKUP / FAULT (keepalived's notify script)
    "GATE_TIMEOUT": str(config_gate.DEFAULT_TIMEOUT),  # the gate's own deadline, seconds
    "GATE_MAX_AGE": "0",  # GATE_FILE: > 0, it must have changed within this long
    "RELAY_ATTESTS": "1",
    "POOL_KEY": "",  # default: RELAY_TOKEN
    "SHARE_TIMEOUT": "2",
    "SMB_PASSWORD": "",  # smb:// lease dirs (DESIGN.md §5.3): the password...
    "SMB_PASSWORD_FILE": "",  # ...or a file holding it (first line)
    "WEB_ALLOWED_HOSTS": "",
    "WEB_TRUSTED_PROXIES": "",
    "WEB_LOGIN_ADDRESS_FAILURES": "20",
    "WEB_LOGIN_FAILURES_PER_S": "0.5",
    "WEB_LOGIN_BURST": "5",
    "WEB_PLAIN": "0",  # 1: plain HTTP (loopback; on a LAN address every page warns), else HTTPS
    "TLS_CERT": "",  # the operator's certificate (PEM); default: one made in DATA_DIR (config_tls)
    "TLS_KEY": "",  # ...and its private key
    "WEB_WS_MAX_BUFFER": str(config_web.WS_MAX_BUFFER),  # bytes held for one slow WebSocket reader...
    "WEB_WS_MAX_MESSAGES": str(config_web.WS_MAX_MESSAGES),  # ...and messages; past either it is closed
    "RELAY_STATION_KEYS_ONLY": "0",
    "RELAY_MAX_PER_ADDRESS": "0",  # 0: sized from the file limit (relay.server.limits)
    "RELAY_LOOPBACK": "auto",  # the relay on 127.0.0.1 too: auto (unless NODE_IP is loopback), on, off
    "RELAY_LEGACY": "0",  # 1: old stations too (relay_client.prg framing, the old MAGIC; config_legacy)
    "RELAY_LEGACY_MAGIC": "",  # the old relay's MAGIC: required with RELAY_LEGACY = 1 (E080)
    "RELAY_LEGACY_WAIT": "0.3",  # seconds the hello is held for a station that speaks first
    "LOG_FORMAT": "text",  # or json: one JSON object per line (stkrelay/logs.py)
    "LOG_MAX_BYTES": str(10 << 20),  # the files the agent writes in DATA_DIR rotate at this size...
    "LOG_BACKUPS": "5",  # ...keeping this many old ones
    # This member's event files on the share (elections/ports/segments.py): the active file is
    # sealed at EVENTS_SEGMENT_BYTES; the newest segments within EVENTS_KEEP_BYTES and younger
    # than EVENTS_KEEP_DAYS are kept, older ones retired (what rules need is kept in a base).
    "EVENTS_SEGMENT_BYTES": str(1 << 20),
    "EVENTS_KEEP_BYTES": str(4 << 20),
    "EVENTS_KEEP_DAYS": "400",
    "CLOUD_URL": "",  # the cloud relay's tunnel port (DESIGN.md §14): tcp://host:port or wss://host/path
    "CLOUD_TOKEN": "",  # this site's secret with the cloud relay (its [site:<KMSN>] CLOUD_TOKEN)
    "BEACON_INTERVAL": str(config_beacons.DEFAULT_INTERVAL),  # 0: off, the lease alone (DESIGN.md §13)
    "BEACON_PORT": "",  # default: RELAY_PORT + 2
    "BEACON_PEERS": "",  # default: the broadcast address of NODE_IP's subnet
    "RELAY_KIND": "builtin",  # or exec: the site's own relay behind the fencing proxy (DESIGN.md §16)
    "RELAY_EXEC": "",  # its command line, placeholders {host} {port} {passthrough_port} {epoch} {kmsn}
    "RELAY_EXEC_LISTEN": "",  # where it listens (loopback): default 127.0.0.1:RELAY_PORT + 10
    **config_notify.DEFAULTS,  # ON_ROLE_CHANGE, WEBHOOK_* (stkrelay/config_notify.py)
    **config_ownership.DEFAULTS,  # where the leader's addresses really are (ADR 0011 phase 4)
    "LANGUAGE_CODE": "",  # the panel's language without a browser's or user's choice (config_i18n)
    "TIME_ZONE": "",  # the zone the panel shows times in; default: this server's
}


ACTION_IDS: dict[str, str] = {  # key prefix -> id, for the leader-action problems
    "VIP": "stkrelay.E014",
    "AWS": "stkrelay.E015",
    "OCI": "stkrelay.E016",
    "AZURE": "stkrelay.E017",
}


@dataclass(frozen=True)
class Problem:
    id: str  # stable: stkrelay.E0xx
    key: str
    message: str
    hint: str

    def line(self) -> str:
        return f"{self.key}: {self.message} ({self.id}) — {self.hint}"


@dataclass
class Config:
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
    etcd_endpoints: list[str] = field(default_factory=list)
    etcd_prefix: str = ""
    etcd_ca: str = ""
    etcd_cert: str = ""
    etcd_key: str = ""
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
    web_plain: bool = False  # plain HTTP instead of HTTPS (stkrelay/config_tls.py)
    tls_cert: str = ""  # the operator's certificate; "" with HTTPS: the one made in DATA_DIR
    tls_key: str = ""
    web_ws_max_buffer: int = 4 << 20  # see config_web.parse_ws_bounds
    web_ws_max_messages: int = 4096
    relay_station_keys_only: bool = False
    relay_max_per_address: int = 0
    relay_loopback: str = "auto"  # auto | on | off (relay.server.listen_set)
    relay_legacy: bool = False  # old stations on the built-in relay (config_legacy, relay.wire.legacy)
    relay_legacy_magic: str = ""
    relay_legacy_wait: float = 0.3
    entry: bool = False  # ENTRY: the router's port-forward reaches this member (relay.server.entry)
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
    clouds: tuple[CloudURL, ...] = ()  # every URL of a comma-separated CLOUD_URL, cloud first (config_cloud)
    beacon_interval: float = config_beacons.DEFAULT_INTERVAL
    beacon_port: int = 9532
    beacon_peers: list[str] = field(default_factory=list)
    relay_kind: str = "builtin"  # or exec (stkrelay/config_exec.py)
    relay_exec: ExecRelay | None = None  # with exec and sound keys: the command and its loopback address
    ownership_check: float = 2.0  # seconds between looks at the addresses; 0 = off (config_ownership)
    ownership_hold: float = 10.0
    ownership_repair: bool = True
    language_code: str = config_i18n.DEFAULT_LANGUAGE
    time_zone: str = "UTC"
    source: str = "(defaults)"
    problems: list[Problem] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)  # every [stk] key as given, overrides applied
    watched: list[WatchedPool] = field(default_factory=list)  # the [pool:<KMSN>] sections (config_pools)
    ignored: list[str] = field(default_factory=list)  # keys of the file nobody reads (the old agent's own)


def _raw(
    ini_path: str | None, env: dict[str, str]
) -> tuple[dict[str, str], str, list[Problem], dict[str, dict[str, str]], set[str]]:
    values = dict(DEFAULTS)
    problems: list[Problem] = []
    pools: dict[str, dict[str, str]] = {}
    given: set[str] = set()
    path = ini_path or env.get("STK_INI")
    source = "(environment)"
    if path:
        source = path
        try:
            parser = config_legacy.read_ini(path)  # the site's file as it is: headerless keys too
        except OSError as exc:
            problems.append(
                Problem(
                    "stkrelay.E001",
                    "STK_INI",
                    f"cannot read {path}: {exc.strerror}",
                    "point --ini or STK_INI at the agent's stk.ini",
                )
            )
        except configparser.Error as exc:
            problems.append(
                Problem(
                    "stkrelay.E001",
                    "STK_INI",
                    f"{path} is not a valid ini file: {str(exc).splitlines()[0]}",
                    "fix the file's syntax",
                )
            )
        else:
            pools = config_pools.sections(parser)
            found = config_legacy.stk_values(parser)
            if found is not None:
                values.update(found)
                given = set(found)
            else:
                problems.append(
                    Problem(
                        "stkrelay.E002",
                        "[stk]",
                        f"{path} has no [stk] section",
                        "put the keys under a [stk] header (or before any section header)",
                    )
                )
    for key, value in env.items():  # every STK_<KEY>, also keys other modules read (VIP_*, AWS_*...)
        if key.startswith("STK_") and key != "STK_INI":
            values[key[4:]] = value.strip()
    return values, source, problems, pools, given


def load(ini_path: str | None = None, env: dict[str, str] | None = None, check_dirs: bool = True) -> Config:
    env = dict(os.environ if env is None else env)
    values, source, problems, pools, given = _raw(ini_path, env)
    cfg = Config(source=source, problems=problems, values=values)
    cfg.ignored = config_legacy.ignored_keys(given, set(DEFAULTS) | set(ACTION_DEFAULTS))

    def bad(pid: str, key: str, message: str, hint: str) -> None:
        problems.append(Problem(pid, key, message, hint))

    def number(key: str, kind: type, low: float, high: float) -> float | int | None:
        text = values[key]
        try:
            value = kind(text)
        except ValueError:
            bad("stkrelay.E010", key, f"{text!r} is not a number", f"set {key} to a number")
            return None
        if not low <= value <= high:
            bad("stkrelay.E011", key, f"{value} is out of range", f"use {low:g}..{high:g}")
            return None
        return value

    cfg.kmsn = values["KMSN"]
    cfg.station = values["STATION"]
    cfg.node = values["NODE"] or cfg.station
    if not cfg.kmsn:
        bad("stkrelay.E003", "KMSN", "is not set", "set KMSN to the site's id, e.g. 9999-9999-99-99")
    if not cfg.station:
        bad("stkrelay.E003", "STATION", "is not set", "set STATION to this agent's station, e.g. S001")
    cfg.relay_token = values["RELAY_TOKEN"]
    if not cfg.relay_token:
        bad(
            "stkrelay.E004",
            "RELAY_TOKEN",
            "is missing",
            "set the site's shared secret (the same on every agent of the KMSN)",
        )
    cfg.pool_key = values["POOL_KEY"] or cfg.relay_token
    cfg.relay_station_keys_only = _flag(values["RELAY_STATION_KEYS_ONLY"], False)
    cfg.relay_legacy, cfg.relay_legacy_magic, cfg.relay_legacy_wait = config_legacy.check(values, _flag, bad)
    per_address = number("RELAY_MAX_PER_ADDRESS", int, 0, 1 << 20)
    cfg.relay_max_per_address = per_address if per_address is not None else 0
    cfg.relay_loopback = _loopback(values["RELAY_LOOPBACK"], bad)
    try:
        cfg.node_ip = str(ipaddress.ip_address(values["NODE_IP"]))
    except ValueError:
        bad(
            "stkrelay.E005",
            "NODE_IP",
            f"{values['NODE_IP']!r} is not an IP address",
            "set the agent's LAN address, e.g. 192.168.1.10",
        )
    for key, attr in (("RELAY_PORT", "relay_port"), ("WEB_PORT", "web_port")):
        value = number(key, int, 1, 65535 - (1 if key == "RELAY_PORT" else 0))
        if value is not None:
            setattr(cfg, attr, value)
    if cfg.web_port in (cfg.relay_port, cfg.relay_port + 1):
        bad(
            "stkrelay.E006",
            "WEB_PORT",
            f"{cfg.web_port} collides with the relay ports",
            f"RELAY_PORT uses {cfg.relay_port} and {cfg.relay_port + 1}",
        )
    taken = (cfg.relay_port, cfg.relay_port + 1, cfg.web_port)
    cfg.entry, cfg.entry_listen = config_entry.check(values, _flag, bad, cfg.node_ip, taken)
    timing = {}
    for key in ("LEASE_TTL", "LEASE_RENEW", "LEASE_POLL", "RENEW_DEADLINE"):
        timing[key] = number(key, float, 0.1, 300)
    cfg.lease_ttl = timing["LEASE_TTL"] or cfg.lease_ttl
    cfg.lease_renew = timing["LEASE_RENEW"] or cfg.lease_renew
    cfg.lease_poll = timing["LEASE_POLL"] or cfg.lease_poll
    cfg.renew_deadline = timing["RENEW_DEADLINE"] or cfg.renew_deadline
    if None not in timing.values():
        if cfg.lease_ttl <= cfg.lease_renew:
            bad(
                "stkrelay.E007",
                "LEASE_TTL",
                f"{cfg.lease_ttl:g} must be greater than LEASE_RENEW={cfg.lease_renew:g}",
                "e.g. LEASE_TTL=10 with LEASE_RENEW=3",
            )
        if cfg.renew_deadline >= cfg.lease_ttl:
            bad(
                "stkrelay.E008",
                "RENEW_DEADLINE",
                f"{cfg.renew_deadline:g} must be less than LEASE_TTL={cfg.lease_ttl:g}",
                "the old leader must stop before anyone may take over",
            )
        if cfg.renew_deadline <= cfg.lease_renew:
            bad(
                "stkrelay.E008",
                "RENEW_DEADLINE",
                f"{cfg.renew_deadline:g} must be greater than LEASE_RENEW={cfg.lease_renew:g}",
                "allow at least one late renewal",
            )
    frame = number("RELAY_MAX_FRAME", int, 1024, 64 << 20)
    cfg.relay_max_frame = frame or cfg.relay_max_frame
    keep = number("RELAY_KEEPALIVE", float, 0.1, 3600)
    cfg.relay_keepalive = keep or cfg.relay_keepalive
    if not values["HEARTBEAT_TTL"]:
        values["HEARTBEAT_TTL"] = str(cfg.lease_ttl)
    hb = number("HEARTBEAT_TTL", float, 0.1, 3600)
    cfg.heartbeat_ttl = hb if hb is not None else cfg.lease_ttl
    hold = number("PROMOTION_HOLD", float, 0, 3600)
    cfg.promotion_hold = hold if hold is not None else cfg.promotion_hold
    watch = number("LEASE_WATCH", float, 0.05, 60)
    cfg.lease_watch = watch if watch is not None else cfg.lease_watch
    # A share operation that outlasts the renew deadline cannot keep a leader
    # acting: the relay's and the executors' gates read the deadline themselves.
    share = number("SHARE_TIMEOUT", float, 0.1, 60)
    cfg.share_timeout = share if share is not None else cfg.share_timeout
    prio = number("PRIORITY", int, 0, 100)
    cfg.priority = prio if prio is not None else cfg.priority
    cfg.health_cmd = values["HEALTH_CMD"]
    cfg.health_url = values["HEALTH_URL"]
    cfg.gate = config_gate.parse(values, cfg.lease_renew, bad, number)
    cfg.notify = config_notify.parse(values, bad, number)
    if None not in (*timing.values(), hb, watch):  # each valid alone: now how they stand together
        config_timing.check(cfg, bad)
    cfg.relay_attests = _flag(values["RELAY_ATTESTS"], True)
    cfg.redis_url = values["REDIS_URL"]
    if not cfg.redis_url.startswith(("redis://", "rediss://", "unix://")):
        bad(
            "stkrelay.E009",
            "REDIS_URL",
            f"{cfg.redis_url!r} is not a redis:// URL",
            "use this agent's local Redis, e.g. redis://127.0.0.1:6379/0",
        )
    _web(cfg, values, bad, number)
    cfg.web_plain = _flag(values["WEB_PLAIN"], False)
    cfg.tls_cert, cfg.tls_key = config_tls.check(values, cfg.web_plain, check_dirs, bad)
    _logs(cfg, values, bad, number)
    _events(cfg, values, bad, number)
    config_cloud.check(cfg, values, bad)
    cfg.beacon_interval = config_beacons.parse_interval(values["BEACON_INTERVAL"], cfg.lease_renew, bad)
    config_beacons.check_serving(cfg.beacon_interval, cfg.lease_ttl, bad)
    cfg.beacon_port = config_beacons.parse_port(values["BEACON_PORT"], cfg.relay_port, cfg.web_port, bad)
    cfg.beacon_peers = config_beacons.parse_peers(values["BEACON_PEERS"], bad)
    check_exec(cfg, values, bad, check_dirs)
    cfg.ownership_check, cfg.ownership_hold, cfg.ownership_repair = config_ownership.parse(
        values, cfg.lease_ttl, cfg.renew_deadline, bad
    )
    cfg.language_code = config_i18n.parse_language(values["LANGUAGE_CODE"], bad)
    cfg.time_zone = config_i18n.parse_time_zone(values["TIME_ZONE"], bad, env)
    for err in action_config(values)[1]:
        bad(ACTION_IDS[err.key.partition("_")[0]], err.key, err.message, err.hint)
    config_store.check_store(cfg, values, bad)
    cfg.lease_dir = values["LEASE_DIR"]
    cfg.watched = config_pools.parse(pools, cfg.kmsn, cfg.node, cfg.lease_dir, cfg.share_timeout, bad)
    cfg.data_dir = values["DATA_DIR"] or str(Path.home() / ".stkrelay" / (cfg.node or "agent"))
    if is_smb(cfg.lease_dir):
        _check_smb(values, bad)
    uses_smb = (cfg.lease_store == "file" and is_smb(cfg.lease_dir)) or any(
        is_smb(w.lease_dir) for w in cfg.watched
    )
    config_libraries.check_libraries(uses_smb, cfg.lease_store == "etcd", bad)
    if check_dirs and cfg.lease_store == "file" and not is_smb(cfg.lease_dir):  # etcd: nothing on a share
        _check_dir(
            cfg.lease_dir,
            "LEASE_DIR",
            "stkrelay.E012",
            bad,
            "mount the site's share and point LEASE_DIR at its socket folder (W:\\socket)",
        )
    if check_dirs:
        try:
            Path(cfg.data_dir).mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # reported just below
        _check_dir(
            cfg.data_dir, "DATA_DIR", "stkrelay.E013", bad, "point DATA_DIR at a writable local folder"
        )
    return cfg


def _web(cfg: Config, values: dict[str, str], bad, number) -> None:  # type: ignore[no-untyped-def]
    """The panel's keys (stkrelay/config_web.py) and the strength of the site's secrets."""
    config_web.check_secrets(values, bad)
    cfg.web_allowed_hosts = config_web.parse_allowed_hosts(values["WEB_ALLOWED_HOSTS"], bad)
    cfg.web_trusted_proxies = config_web.parse_trusted_proxies(values["WEB_TRUSTED_PROXIES"], bad)
    config_web.check_retired_forwarded_for(values, bad)
    per_address = number("WEB_LOGIN_ADDRESS_FAILURES", int, 1, 10000)
    cfg.web_login_address_failures = per_address or cfg.web_login_address_failures
    rate = number("WEB_LOGIN_FAILURES_PER_S", float, 0.01, 1000)
    cfg.web_login_failures_per_s = rate or cfg.web_login_failures_per_s
    burst = number("WEB_LOGIN_BURST", int, 1, 10000)
    cfg.web_login_burst = burst or cfg.web_login_burst
    ws_bounds = config_web.parse_ws_bounds(values, cfg.relay_max_frame, bad)
    cfg.web_ws_max_buffer, cfg.web_ws_max_messages = ws_bounds


def _logs(cfg: Config, values: dict[str, str], bad, number) -> None:  # type: ignore[no-untyped-def]
    """LOG_FORMAT (E021) and the rotation of the agent's files in DATA_DIR."""
    fmt = values["LOG_FORMAT"].lower()
    if fmt in ("text", "json"):
        cfg.log_format = fmt
    else:
        bad("stkrelay.E021", "LOG_FORMAT", f"{values['LOG_FORMAT']!r} is not a log format",
            "use text or json")  # fmt: skip
    size = number("LOG_MAX_BYTES", int, 4096, 1 << 40)
    cfg.log_max_bytes = size or cfg.log_max_bytes
    backups = number("LOG_BACKUPS", int, 1, 1000)
    cfg.log_backups = backups or cfg.log_backups


def _events(cfg: Config, values: dict[str, str], bad, number) -> None:  # type: ignore[no-untyped-def]
    """The retention of this member's event files (E041 when it cannot hold one segment)."""
    segment = number("EVENTS_SEGMENT_BYTES", int, 4096, 8 << 20)  # readers read at most 64 MiB of one
    cfg.events_segment_bytes = segment or cfg.events_segment_bytes
    keep = number("EVENTS_KEEP_BYTES", int, 4096, 1 << 40)
    cfg.events_keep_bytes = keep or cfg.events_keep_bytes
    days = number("EVENTS_KEEP_DAYS", float, 1, 100_000)
    cfg.events_keep_days = days or cfg.events_keep_days
    if cfg.events_keep_bytes < 2 * cfg.events_segment_bytes:
        bad("stkrelay.E041", "EVENTS_KEEP_BYTES",
            f"{cfg.events_keep_bytes} must be at least twice EVENTS_SEGMENT_BYTES={cfg.events_segment_bytes}",
            "keep the active file and at least one sealed segment")  # fmt: skip


LOOPBACK_WORDS = {"auto": "auto", "on": "on", "1": "on", "yes": "on", "off": "off", "0": "off", "no": "off"}


def _loopback(text: str, bad) -> str:  # type: ignore[no-untyped-def]
    """RELAY_LOOPBACK (E090): whether the relay listens on 127.0.0.1 besides NODE_IP."""
    mode = LOOPBACK_WORDS.get(text.strip().lower())
    if mode is None:
        bad("stkrelay.E090", "RELAY_LOOPBACK", f"{text!r} is not auto, on or off",
            "auto (127.0.0.1 unless NODE_IP is a loopback address), on, or off")  # fmt: skip
        return "auto"
    return mode


def _flag(text: str, default: bool) -> bool:
    """An ini boolean: 0/no/false/off are false, any other text true, empty the default."""
    return default if not text else text.lower() not in ("0", "no", "false", "off")


def _check_smb(values: dict[str, str], bad) -> None:  # type: ignore[no-untyped-def]
    """An smb:// LEASE_DIR (E012) and its password (E022), without touching the
    network: the share is checked by `relayctl doctor` and by the agent itself."""
    try:
        url = parse_smb_url(values["LEASE_DIR"])
    except SmbUrlError as exc:
        bad("stkrelay.E012", "LEASE_DIR", str(exc), "use smb://[user@]host[:port]/share/folder")
        return
    try:
        password = smb_password(values)
    except SmbUrlError as exc:
        bad("stkrelay.E022", "SMB_PASSWORD_FILE", str(exc), "name a file this agent can read")
        return
    if url.user and not password:
        bad("stkrelay.E022", "SMB_PASSWORD", f"is not set for {url.user}@{url.host}",
            "set SMB_PASSWORD, or SMB_PASSWORD_FILE naming a file that holds it")  # fmt: skip


def _check_dir(path: str, key: str, pid: str, bad, hint: str) -> None:  # type: ignore[no-untyped-def]
    if not path:
        bad(pid, key, "is not set", hint)
        return
    if not os.path.isdir(path):
        bad(pid, key, f"{path} is not a directory", hint)
        return
    try:
        fd, probe = tempfile.mkstemp(prefix=".stk-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
        os.listdir(path)
    except OSError as exc:
        bad(pid, key, f"{path} is not readable and writable ({exc.strerror})", hint)
