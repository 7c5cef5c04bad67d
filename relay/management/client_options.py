"""The options of `relayclient`: its arguments, and the `RelayClient` they configure.

Options that cannot work end the command with a `Stop` (exit status and one
line); secrets come from files or the environment, never from argv
(`stkhost.secret_source`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from relay.client.beacon_discovery import BeaconListener
from relay.client.discovery import Discovery
from relay.client.events import Status
from relay.client.relay_client import RelayClient
from relay.lease_file import lease_file
from stkconfig.smburl import is_smb
from stkhost.fingerprints import parse_pins
from stkhost.secret_source import SecretUnreadable, argv_refusal, from_environment, read_secret

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_LEADER, EXIT_REFUSED = 0, 1, 2, 3, 4


class Stop(Exception):
    """End the command with `code` after printing `line` (if any) to stderr."""

    def __init__(self, code: int, line: str = "") -> None:
        super().__init__(line)
        self.code, self.line = code, line


def parse_fallback(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as a pair; ArgumentTypeError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def _secret(path: str | None, flag: str) -> str:
    """The secret in file `path` (`-`: stdin; stripped), "" without a path; `Stop` if unreadable or empty."""
    if not path:
        return ""
    try:
        return read_secret(path, flag).strip()
    except SecretUnreadable as exc:
        raise Stop(EXIT_USAGE, f"relayclient: {exc}") from None


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def add_common(parser: argparse.ArgumentParser, *, role_required: bool) -> None:
    """The options every action takes: who to register as, the secrets' files, how to find the leader."""
    parser.add_argument("--role", choices=("agent", "commander"), required=role_required)
    parser.add_argument("--station", help="the station to register as")
    parser.add_argument("--kmsn", help="the site's KMSN (default: settings KMSN)")
    parser.add_argument("--token", help="refused (visible in ps): use --token-file or $STK_RELAY_TOKEN")
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="read the site's relay token from PATH ('-': stdin; default $STK_RELAY_TOKEN, else RELAY_TOKEN)",
    )
    parser.add_argument(
        "--credential-file",
        metavar="PATH",
        help="read this station's relay credential from PATH ('-': stdin; default $STK_RELAY_CREDENTIAL)",
    )
    parser.add_argument("--lease-dir", help="the pool's lease dir (default: settings LEASE_DIR; '' for none)")
    parser.add_argument(
        "--agent", action="append", default=[], metavar="URL", help="an agent's web URL (repeatable)"
    )
    parser.add_argument("--api-token", help="refused (visible in ps): use --api-token-file or $STK_API_TOKEN")
    parser.add_argument(
        "--api-token-file",
        metavar="PATH",
        help="read the panel API token for --agent lookups from PATH ('-': stdin; default $STK_API_TOKEN); "
        "not needed when the agents set STK_PUBLIC_LEADER_LOOKUP=1",
    )
    parser.add_argument(
        "--agent-pin",
        action="append",
        default=[],
        metavar="SHA256",
        help="an agent's panel certificate fingerprint, as `relayctl tls` prints it (repeatable: one per "
        "agent); only pinned certificates are spoken to",
    )
    parser.add_argument(
        "--agent-ca", metavar="PATH", help="verify the agents' certificates against this CA file instead"
    )
    parser.add_argument(
        "--fallback",
        action="append",
        default=[],
        type=parse_fallback,
        metavar="HOST:PORT",
        help="a relay address to try when nothing else knows the leader (repeatable)",
    )
    parser.add_argument(
        "--discover",
        action="store_true",
        help="also find the relay from the leader's beacons on the LAN (no share needed)",
    )
    parser.add_argument(
        "--beacon-port", type=int, help="where beacons arrive (default: settings BEACON_PORT)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--connect-timeout",
        type=positive,
        default=10.0,
        help="seconds to find and register with a leader (default 10)",
    )
    parser.add_argument(
        "--keepalive", type=positive, default=10.0, help="keepalive interval in seconds (default 10)"
    )


def build_client(options: dict[str, Any], on_status: Callable[[Status], None]) -> RelayClient:
    """The `RelayClient` the options of one action configure (settings fill the gaps);
    `Stop(EXIT_USAGE)` naming what is missing or wrong."""
    from django.conf import settings

    stk = settings.STK
    action = options["action"]
    kmsn = options["kmsn"] or stk.kmsn
    if options["token"] is not None:
        raise Stop(EXIT_USAGE, "relayclient: " + argv_refusal("--token", "--token-file PATH ('-': stdin)",
                                                              "$STK_RELAY_TOKEN"))  # fmt: skip
    if options["api_token"] is not None:
        raise Stop(EXIT_USAGE, "relayclient: " + argv_refusal("--api-token", "--api-token-file PATH",
                                                              "$STK_API_TOKEN"))  # fmt: skip
    files = [options[k] for k in ("token_file", "credential_file", "api_token_file") if options[k]]
    if files.count("-") > 1:
        raise Stop(EXIT_USAGE, "relayclient: stdin ('-') can hold one secret only")
    token = _secret(options["token_file"], "--token-file") or stk.relay_token
    credential = _secret(options["credential_file"], "--credential-file") or from_environment(
        "STK_RELAY_CREDENTIAL"
    )
    api_token = _secret(options["api_token_file"], "--api-token-file") or from_environment("STK_API_TOKEN")
    lease_dir = stk.lease_dir if options["lease_dir"] is None else options["lease_dir"]
    if not token:
        lease_dir = ""  # its signature cannot be checked with a station credential
    role = options["role"] or "commander"
    station = options["station"] or (f"ping-{os.getpid()}" if action == "ping" else "")
    if not kmsn:
        raise Stop(EXIT_USAGE, "relayclient: no KMSN: pass --kmsn or set KMSN (STK_KMSN)")
    if not (token or credential):
        raise Stop(
            EXIT_USAGE,
            "relayclient: no relay token: pass --token-file, --credential-file or set RELAY_TOKEN",
        )
    if not station:
        raise Stop(EXIT_USAGE, f"relayclient {action}: --station is required")
    if action == "send" and role == "commander" and not options.get("to"):
        raise Stop(EXIT_USAGE, "relayclient send: a commander must name --to (a station, or '*')")
    if lease_dir and not is_smb(lease_dir) and not os.path.isdir(lease_dir):
        raise Stop(EXIT_USAGE, f"relayclient: lease dir {lease_dir} is not a directory")
    beacon_port = (options["beacon_port"] or stk.beacon_port) if options["discover"] else None
    if not (lease_dir or options["agent"] or options["fallback"] or beacon_port):
        raise Stop(
            EXIT_USAGE,
            "relayclient: no way to find the leader: set LEASE_DIR, or pass --discover, --agent "
            "or --fallback",
        )
    if options.get("count") is not None and options["count"] < 1:
        raise Stop(EXIT_USAGE, f"relayclient {action}: --count must be at least 1")
    try:
        pins = parse_pins(options["agent_pin"])
    except ValueError as exc:
        raise Stop(EXIT_USAGE, f"relayclient: --agent-pin: {exc}") from None
    discovery = Discovery.build(
        kmsn=kmsn,
        lease=lease_file(lease_dir, token, kmsn, stk.smb) if lease_dir else None,  # an smb:// LEASE_DIR
        agents=options["agent"],
        fallbacks=options["fallback"],
        api_token=api_token or None,
        beacons=BeaconListener(token, kmsn, beacon_port) if beacon_port else None,
        agent_pins=pins,
        agent_ca=options["agent_ca"],
    )
    return RelayClient(
        role=role,
        kmsn=kmsn,
        station=station,
        token=token,
        credential=credential,
        discovery=discovery,
        keepalive=options["keepalive"],
        connect_timeout=min(options["connect_timeout"], 5.0),
        on_status=on_status,
    )
