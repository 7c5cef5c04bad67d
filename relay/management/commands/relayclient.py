"""`python manage.py relayclient`: an operator's relay client (DESIGN.md §9).

    relayclient listen --role agent --station S002          # one JSON line per message
    relayclient send --role commander --station C01 --to S002 '{"x": 1}'
    relayclient ping                                         # leader, epoch, round-trip time

The leader is found like `relay.client.relay_client.RelayClient` finds it: the signed lease
in ``--lease-dir`` (default: settings LEASE_DIR), else ``--agent URL``
(repeatable: agents' ``/api/v1/leader``, over HTTPS pinned by ``--agent-pin SHA256``,
one per agent as ``relayctl tls`` prints it, or verified by ``--agent-ca PATH``),
else ``--fallback HOST:PORT`` (repeatable). ``--kmsn`` and the token default to
the agent's settings (KMSN, RELAY_TOKEN, which ``$STK_RELAY_TOKEN`` overrides).
Needs no Redis and no database.

Secrets never come from argv (visible in ``ps`` and shell history;
`elections.ports.secret_source`): the site token from ``--token-file PATH``
(``-``: stdin), else ``$STK_RELAY_TOKEN`` / settings; a station's credential
(``relayctl credential STATION``, DESIGN §8) from ``--credential-file PATH`` or
``$STK_RELAY_CREDENTIAL``: with one, the client authenticates as that station
with it (the token, if any, still verifies the lease); the panel API token of
``--agent`` lookups from ``--api-token-file PATH`` or ``$STK_API_TOKEN``. The
old ``--token T`` and ``--api-token T`` are refused (exit 2, one line naming
these).

Results go to stdout (``--json``: one JSON object per line); status and errors
go to stderr, one line each (``--json``: JSON objects). Whatever came from the
relay or the share is printed with its control and bidi characters escaped
(``\u001b``; `elections.core.terminal`), in JSON too (still the same JSON). Exit status:

- 0 done (``listen``: after ``--count`` messages, ``--for`` seconds, or SIGINT/SIGTERM);
- 1 the relay answered the send with an error (``no_route``: nobody to receive
  it), or the connection was lost before it could confirm;
- 2 bad usage or configuration;
- 3 no leader could be reached within ``--connect-timeout``;
- 4 the relay refused us (``bad_auth``, ``wrong_kmsn`` ...).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
from typing import Any

from django.core.management.base import CommandParser

from elections.ports.pinned_https import parse_pins
from elections.ports.secret_source import SecretUnreadable, argv_refusal, from_environment, read_secret
from elections.ports.smburl import is_smb
from elections.ports.terminal import make_safe
from relay.client.beacon_discovery import BeaconListener
from relay.client.discovery import Discovery
from relay.client.events import ClientClosed, ConnectionLost, NoLeader, Received, Refused, ServerError, Status
from relay.client.relay_client import RelayClient
from stkrelay.operator_command import OperatorCommand

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


def _common(parser: argparse.ArgumentParser, *, role_required: bool) -> None:
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


class Command(OperatorCommand):
    help = "Talk to the leader's relay: listen for messages, send one, or ping."
    # A client machine need not be a configured agent: check only what this command uses.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{listen,send,ping}")
        listen = sub.add_parser("listen", help="print each message received as a JSON line")
        _common(listen, role_required=True)
        listen.add_argument("--count", type=int, help="exit 0 after this many messages")
        listen.add_argument("--for", dest="duration", type=positive, help="exit 0 after this many seconds")
        send = sub.add_parser("send", help="send one message; wait until the relay routed it")
        _common(send, role_required=True)
        send.add_argument("--to", help="recipient station ('*': all agents); required for a commander")
        send.add_argument("--id", help="message id (default: random)")
        send.add_argument("--timeout", type=positive, default=5.0, help="seconds to wait for the relay")
        send.add_argument("message", help="the message data, as JSON (a string needs quotes: '\"hi\"')")
        ping = sub.add_parser("ping", help="register, time keepalive round trips, print leader and epoch")
        _common(ping, role_required=False)
        ping.add_argument("--count", type=int, default=3, help="round trips (default 3)")

    def handle(self, *args: Any, **options: Any) -> None:
        make_safe(self)  # messages, reasons and names from the relay are printed escaped (one line each)
        self.as_json = options["json"]
        self.verbose = options["verbosity"] >= 2
        self.registered_once = False
        if not self.verbose:
            logging.getLogger("stkrelay.client").setLevel(logging.ERROR)  # errors are one line of ours
        try:
            client = self._client(options)
            code = asyncio.run(getattr(self, f"_{options['action']}")(client, options))
        except Stop as stop:
            if stop.line:
                self._status({"error": stop.line}, stop.line)
            code = stop.code
        if code:
            raise SystemExit(code)

    # -- configuration -----------------------------------------------------------------
    def _client(self, options: dict[str, Any]) -> RelayClient:
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
        api_token = _secret(options["api_token_file"], "--api-token-file") or from_environment(
            "STK_API_TOKEN"
        )
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
            token=token,
            kmsn=kmsn,
            lease_dir=lease_dir or None,
            agents=options["agent"],
            fallbacks=options["fallback"],
            api_token=api_token or None,
            lease_options=stk.values,  # an smb:// LEASE_DIR logs in with SMB_PASSWORD(_FILE)
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
            on_status=self._on_status,
        )

    # -- output --------------------------------------------------------------------------
    def _out(self, doc: dict[str, Any], line: str) -> None:
        self.stdout.write(json.dumps(doc, ensure_ascii=False) if self.as_json else line)
        self.stdout.flush()

    def _status(self, doc: dict[str, Any], line: str) -> None:
        self.stderr.write(json.dumps(doc, ensure_ascii=False) if self.as_json else line)
        self.stderr.flush()

    def _on_status(self, status: Status) -> None:
        if status.kind == "registered":
            self.registered_once = True
        elif status.kind not in ("reconnecting", "refused"):
            return  # "connecting" and "closed" are noise for an operator
        elif not (self.registered_once or self.verbose):
            return  # before the first registration, the final error line says it all
        leader = status.leader
        doc = {
            "status": status.kind,
            "node": status.node,
            "ip": leader.ip if leader else None,
            "port": leader.port if leader else None,
            "epoch": status.epoch,
            "reason": status.reason,
        }
        self._status(doc, f"relayclient: {status.describe()}")

    async def _start(self, client: RelayClient, options: dict[str, Any]) -> None:
        try:
            await client.start(timeout=options["connect_timeout"])
        except Refused as exc:
            raise Stop(EXIT_REFUSED, f"relayclient: {exc}") from None
        except NoLeader as exc:
            raise Stop(EXIT_NO_LEADER, f"relayclient: cannot reach a leader: {exc}") from None

    # -- actions -----------------------------------------------------------------------
    async def _listen(self, client: RelayClient, options: dict[str, Any]) -> int:
        await self._start(client, options)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # Windows: Ctrl-C still interrupts
                pass
        if options["duration"]:
            loop.call_later(options["duration"], stop.set)
        count, seen = options["count"], 0

        async def pump() -> None:
            nonlocal seen
            async for item in client.messages():
                doc = item.as_dict()
                self.stdout.write(json.dumps(doc, ensure_ascii=False))
                self.stdout.flush()
                if isinstance(item, Received):
                    seen += 1
                    if count is not None and seen >= count:
                        stop.set()

        reader = asyncio.create_task(pump())
        await stop.wait()
        reader.cancel()
        await client.close()
        return EXIT_OK

    async def _send(self, client: RelayClient, options: dict[str, Any]) -> int:
        try:
            data = json.loads(options["message"])
        except ValueError as exc:
            raise Stop(
                EXIT_USAGE, f"relayclient send: the message is not JSON ({exc}); quote a string: '\"hi\"'"
            ) from None
        await self._start(client, options)
        leader, node, epoch = client.leader, client.node, client.epoch
        try:
            id = await client.send_confirmed(
                data, to=options["to"], id=options["id"], timeout=options["timeout"]
            )
        except ServerError as exc:
            raise Stop(EXIT_FAILED, f"relayclient send: the relay refused the message: {exc}") from None
        except (ConnectionLost, ClientClosed, TimeoutError) as exc:
            why = str(exc) or f"no answer within {options['timeout']:g} s"
            raise Stop(EXIT_FAILED, f"relayclient send: not confirmed: {why}") from None
        finally:
            await client.close()
        assert leader is not None
        to = options["to"]
        doc = {
            "ok": True,
            "id": id,
            "to": to,
            "node": node,
            "ip": leader.ip,
            "port": leader.port,
            "epoch": epoch,
        }
        where = f"{node} at {leader.ip}:{leader.port} epoch {epoch}"
        self._out(doc, f"relayclient: sent id={id} to {to or 'every commander'} via {where}")
        return EXIT_OK

    async def _ping(self, client: RelayClient, options: dict[str, Any]) -> int:
        await self._start(client, options)
        leader, node, epoch, session = client.leader, client.node, client.epoch, client.session_id
        rtts: list[float] = []
        try:
            for _ in range(options["count"]):
                rtts.append(await client.ping(timeout=5.0))
        except (ConnectionLost, TimeoutError) as exc:
            raise Stop(EXIT_FAILED, f"relayclient ping: {exc or 'no keepalive answer within 5 s'}") from None
        finally:
            await client.close()
        assert leader is not None
        ms = [round(r * 1000, 3) for r in rtts]
        doc = {
            "leader": node,
            "ip": leader.ip,
            "port": leader.port,
            "epoch": epoch,
            "source": leader.source,
            "session": session,
            "rtt_ms": ms,
        }
        line = (
            f"leader {node} at {leader.ip}:{leader.port} epoch {epoch} (from {leader.source}); "
            f"rtt min/avg/max {min(ms):.3f}/{sum(ms) / len(ms):.3f}/{max(ms):.3f} ms"
        )
        self._out(doc, line)
        return EXIT_OK
