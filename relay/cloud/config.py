"""The cloud relay's configuration: `cloud.ini` (docs/design.md §14).

``[cloud]``: ``LISTEN_IP`` (default ``127.0.0.1``; a cloud VM sets its public
or ``0.0.0.0``), ``RELAY_PORT`` (remote clients, protocol v1, default 9540;
passthrough on ``RELAY_PORT + 1``), ``TUNNEL_PORT`` (default 9542),
``WEB_PORT`` (WebSocket clients at ``/ws/relay/``, status JSON at ``/status``,
metrics at ``/metrics``; default 9543), ``DATA_DIR`` (the saved epochs;
default ``~/.stkrelay/cloud``), ``RELAY_MAX_FRAME``, ``RELAY_KEEPALIVE`` and
``PARK`` (seconds a remote client's ``register`` may wait for its site's
tunnel, default 4: below the clients' 5 s registration deadline), ``PARK_MAX``
(remote clients parked at once per site, default 256; more are refused
``not_leader`` at once). One ``[site:<KMSN>]`` per site with its
``CLOUD_TOKEN``, as strong as a site key
(`stkconfig.strength.secret_weakness`: at least 16 characters, 6 distinct,
not one short run repeated, not the example's placeholder), and its ``LEASE_KEY``: the 64-hex
K_cloud of `relay.wire.lease_mac` (``relayctl cloud-key`` on an agent of the
site prints it), or ``LEASE_KEY_FILE`` naming a file whose first line holds
it (a relative path is taken from the folder of cloud.ini).

A site without a lease key is a configuration error (``stkrelay.C009``), not
a site whose leases go unchecked: there is no opt-out, because an unchecked
site is exactly the hole the key closes (a CLOUD_TOKEN holder takes its outside
entry with a made-up epoch). Upgrading needs none either: agents that add
``cloud_sig`` are served by an older cloud, which ignores the field; upgrade
the agents first, then give the cloud the keys.

`load()` never raises for bad values: it returns the config with a list of
`stkrelay.config.Problem`s (ids ``stkrelay.C001``…), like the agent's loader.
"""

from __future__ import annotations

import configparser
import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from relay.cloud.config_cluster import Cluster, cluster_config
from relay.cloud.grants import Grant
from stkconfig.model import Problem
from stkconfig.strength import secret_weakness

LEASE_KEY_HEX = 64
HEX = frozenset("0123456789abcdef")


@dataclass
class CloudConfig:
    listen_ip: str = "127.0.0.1"
    relay_port: int = 9540
    tunnel_port: int = 9542
    web_port: int = 9543
    data_dir: str = ""
    max_frame: int = 1 << 20
    keepalive: float = 10.0
    park: float = 4.0
    park_max: int = 256
    tokens: dict[str, str] = field(default_factory=dict)  # kmsn -> CLOUD_TOKEN
    lease_keys: dict[str, str] = field(default_factory=dict)  # kmsn -> K_cloud (64 hex, lower case)
    grants: dict[str, Grant] = field(default_factory=dict)  # [grant:<NAME>]: cross-site commanders
    cluster: Cluster | None = None  # several nodes sharing the etcd directory (`relay.cloud.cluster`)
    source: str = ""
    problems: list[Problem] = field(default_factory=list)


def load(path: str | None) -> CloudConfig:
    cfg = CloudConfig(source=path or "(none)")
    bad = cfg.problems.append
    parser = _parse(path, bad)
    if parser is None or path is None:
        return cfg
    values = {k.upper(): v.strip() for k, v in parser.items("cloud")}
    ports = _cloud_section(values, cfg, bad)
    _sites(parser, Path(path).parent, cfg, bad)
    _grants(parser, cfg)
    cfg.cluster = cluster_config(values, cfg.relay_port, bad)
    if cfg.cluster is not None and cfg.cluster.peer_port in ports:
        bad(Problem("stkrelay.E236", "PEER_PORT", f"collides with another port: {ports}",
                    "PEER_PORT differs from RELAY_PORT, RELAY_PORT+1, TUNNEL_PORT, WEB_PORT"))  # fmt: skip
        cfg.cluster = None
    site_problems = ("stkrelay.C007", "stkrelay.C009", "stkrelay.C010", "stkrelay.C011")
    if not cfg.tokens and not any(p.id in site_problems for p in cfg.problems):
        bad(Problem("stkrelay.C008", "[site:<KMSN>]", "no site configured",
                    "add one [site:<KMSN>] section with CLOUD_TOKEN and LEASE_KEY per site"))  # fmt: skip
    return cfg


def _parse(path: str | None, bad: Callable[[Problem], None]) -> configparser.ConfigParser | None:
    """cloud.ini read and parsed, with its `[cloud]` section; None (and the problem told) if not."""
    if not path:
        bad(Problem("stkrelay.C001", "--ini", "no cloud.ini given", "pass --ini PATH or set CLOUD_INI"))
        return None
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str.upper  # type: ignore[assignment, method-assign]
    try:
        with open(path, encoding="utf-8-sig") as fh:
            parser.read_file(fh)
    except (OSError, configparser.Error) as exc:
        bad(Problem("stkrelay.C001", "--ini", f"cannot read {path}: {exc}", "point --ini at cloud.ini"))
        return None
    if not parser.has_section("cloud"):
        bad(Problem("stkrelay.C002", "[cloud]", f"{path} has no [cloud] section", "add a [cloud] header"))
        return None
    return parser


def _number(values: dict[str, str], bad: Callable[[Problem], None], key: str, kind: type, default: float,
            low: float, high: float) -> float:  # fmt: skip
    """`values[key]` as a `kind` within low..high; `default` if unset, and if bad (told as C003)."""
    text = values.get(key, "")
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        bad(Problem("stkrelay.C003", key, f"{text!r} is not a number", f"set {key} to a number"))
        return default
    if not low <= value <= high:
        bad(Problem("stkrelay.C003", key, f"{value} is out of range", f"use {low:g}..{high:g}"))
        return default
    return value


def _cloud_section(values: dict[str, str], cfg: CloudConfig, bad: Callable[[Problem], None]) -> list[int]:
    """The `[cloud]` section's own keys into `cfg`; the ports it listens on, which must differ."""

    def number(key: str, kind: type, default: float, low: float, high: float) -> float:
        return _number(values, bad, key, kind, default, low, high)

    try:
        cfg.listen_ip = str(ipaddress.ip_address(values.get("LISTEN_IP", "") or cfg.listen_ip))
    except ValueError:
        bad(Problem("stkrelay.C004", "LISTEN_IP", f"{values['LISTEN_IP']!r} is not an IP address",
                    "e.g. 0.0.0.0 or the VM's address"))  # fmt: skip
    cfg.relay_port = int(number("RELAY_PORT", int, 9540, 1, 65534))
    cfg.tunnel_port = int(number("TUNNEL_PORT", int, cfg.relay_port + 2, 1, 65535))
    cfg.web_port = int(number("WEB_PORT", int, cfg.relay_port + 3, 1, 65535))
    ports = [cfg.relay_port, cfg.relay_port + 1, cfg.tunnel_port, cfg.web_port]
    if len(set(ports)) != len(ports):
        bad(Problem("stkrelay.C005", "TUNNEL_PORT", f"ports collide: {ports}",
                    "RELAY_PORT, RELAY_PORT+1, TUNNEL_PORT and WEB_PORT must differ"))  # fmt: skip
    cfg.max_frame = int(number("RELAY_MAX_FRAME", int, 1 << 20, 1024, 64 << 20))
    cfg.keepalive = number("RELAY_KEEPALIVE", float, 10.0, 0.1, 3600)
    cfg.park = number("PARK", float, 4.0, 0, 30)
    cfg.park_max = int(number("PARK_MAX", int, 256, 1, 100_000))
    cfg.data_dir = values.get("DATA_DIR", "") or str(Path.home() / ".stkrelay" / "cloud")
    try:
        Path(cfg.data_dir).mkdir(parents=True, exist_ok=True)
        if not os.access(cfg.data_dir, os.W_OK):
            raise PermissionError(cfg.data_dir)
    except OSError as exc:
        bad(Problem("stkrelay.C006", "DATA_DIR", f"{cfg.data_dir} is not writable ({exc})",
                    "point DATA_DIR at a writable folder"))  # fmt: skip
    return ports


def _sites(parser: configparser.ConfigParser, base: Path, cfg: CloudConfig,
           bad: Callable[[Problem], None]) -> None:  # fmt: skip
    """The ``[site:<KMSN>]`` sections: each site's CLOUD_TOKEN and LEASE_KEY (C007 and `_lease_key`'s)."""
    for section in parser.sections():
        if not section.startswith("site:"):
            continue
        kmsn = section[5:].strip()
        token = parser.get(section, "CLOUD_TOKEN", fallback="").strip()
        if not kmsn:
            bad(Problem("stkrelay.C007", f"[{section}]", "names no KMSN", "e.g. [site:9999-9999-99-99]"))
        elif secret_weakness(token):  # short, few distinct characters, a repeated run, a placeholder
            bad(Problem("stkrelay.C007", f"[{section}] CLOUD_TOKEN", secret_weakness(token),
                        "set the site's CLOUD_TOKEN (the same as in its agents' stk.ini) to a long random "
                        "secret"))  # fmt: skip
        else:
            key = _lease_key(parser, section, base, token, bad)
            if key is not None:
                cfg.tokens[kmsn], cfg.lease_keys[kmsn] = token, key


def _grants(parser: configparser.ConfigParser, cfg: CloudConfig) -> None:
    """The ``[grant:<NAME>]`` sections (`relay.cloud.grants`); a bad one is ``stkrelay.E210``."""
    for section in parser.sections():
        if not section.startswith("grant:"):
            continue
        name = section[6:].strip()
        token = parser.get(section, "TOKEN", fallback="").strip()
        listed = parser.get(section, "KMSNS", fallback="").split(",")
        kmsns = frozenset(k.strip() for k in listed if k.strip())
        unknown = sorted(kmsns - set(cfg.tokens))
        weak = secret_weakness(token)
        why = (
            ("names no commander" if not name else "")
            or (weak and f"TOKEN {weak}")
            or ("" if kmsns else "KMSNS lists no site")
            or (f"KMSNS lists sites this cloud does not serve: {unknown}" if unknown else "")
        )
        if why:
            hint = "e.g. TOKEN = <a long random secret>, KMSNS = <KMSN>, <KMSN> (each a [site:<KMSN>] here)"
            cfg.problems.append(Problem("stkrelay.E210", f"[{section}]", why, hint))
        else:
            cfg.grants[name] = Grant(name, token, kmsns)


def _lease_key(parser: configparser.ConfigParser, section: str, base: Path, token: str,
               bad: Callable[[Problem], None]) -> str | None:  # fmt: skip
    """The site's K_cloud from LEASE_KEY or LEASE_KEY_FILE, or None (reported)."""
    text = parser.get(section, "LEASE_KEY", fallback="").strip()
    name = parser.get(section, "LEASE_KEY_FILE", fallback="").strip()
    hint = "set LEASE_KEY to what `python manage.py relayctl cloud-key` prints on an agent of the site"
    if text and name:
        bad(Problem("stkrelay.C010", f"[{section}] LEASE_KEY", "is set along with LEASE_KEY_FILE",
                    "keep one of the two"))  # fmt: skip
        return None
    key = f"[{section}] LEASE_KEY"
    if name:
        key = f"[{section}] LEASE_KEY_FILE"
        try:
            with open(base / name, encoding="utf-8") as fh:
                lines = fh.read(4096).strip().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            lines, why = [], f"cannot read {name}: {exc}"
        else:
            why = f"{name} is empty"
        if not lines:
            bad(Problem("stkrelay.C010", key, why, "name a readable file holding the key on its first line"))
            return None
        text = lines[0].strip()
    if not text:
        bad(Problem("stkrelay.C009", key, "is not set: the cloud could not verify this site's leases",
                    f"{hint} (there is no way to serve a site unchecked)"))  # fmt: skip
        return None
    text = text.lower()
    if len(text) != LEASE_KEY_HEX or not set(text) <= HEX:
        bad(Problem("stkrelay.C010", key, f"is not {LEASE_KEY_HEX} hex characters", hint))
        return None
    if text == token.strip().lower():
        bad(Problem("stkrelay.C011", key, "is CLOUD_TOKEN: whoever holds the token could sign leases",
                    "CLOUD_TOKEN is a secret of its own; LEASE_KEY is relayctl cloud-key's"))  # fmt: skip
        return None
    return text
