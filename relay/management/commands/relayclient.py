"""`python manage.py relayclient`: an operator's relay client (docs/design.md §9).

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
`stkhost.secret_source`): the site token from ``--token-file PATH``
(``-``: stdin), else ``$STK_RELAY_TOKEN`` / settings; a station's credential
(``relayctl credential STATION``, docs/design.md §8) from ``--credential-file PATH`` or
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

import asyncio
import json
import logging
import signal
from typing import Any

from django.core.management.base import CommandParser

from elections.ports.local.terminal import make_safe
from relay.client.events import ClientClosed, ConnectionLost, NoLeader, Received, Refused, ServerError, Status
from relay.client.relay_client import RelayClient
from relay.management.client_options import (
    EXIT_FAILED,
    EXIT_NO_LEADER,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    Stop,
    add_common,
    build_client,
    positive,
)
from stkrelay.operator_command import OperatorCommand


class Command(OperatorCommand):
    help = "Talk to the leader's relay: listen for messages, send one, or ping."
    # A client machine need not be a configured agent: check only what this command uses.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{listen,send,ping}")
        listen = sub.add_parser("listen", help="print each message received as a JSON line")
        add_common(listen, role_required=True)
        listen.add_argument("--count", type=int, help="exit 0 after this many messages")
        listen.add_argument("--for", dest="duration", type=positive, help="exit 0 after this many seconds")
        send = sub.add_parser("send", help="send one message; wait until the relay routed it")
        add_common(send, role_required=True)
        send.add_argument("--to", help="recipient station ('*': all agents); required for a commander")
        send.add_argument("--id", help="message id (default: random)")
        send.add_argument("--timeout", type=positive, default=5.0, help="seconds to wait for the relay")
        send.add_argument("message", help="the message data, as JSON (a string needs quotes: '\"hi\"')")
        ping = sub.add_parser("ping", help="register, time keepalive round trips, print leader and epoch")
        add_common(ping, role_required=False)
        ping.add_argument("--count", type=int, default=3, help="round trips (default 3)")

    def handle(self, *args: Any, **options: Any) -> None:
        make_safe(self)  # messages, reasons and names from the relay are printed escaped (one line each)
        self.as_json = options["json"]
        self.verbose = options["verbosity"] >= 2
        self.registered_once = False
        if not self.verbose:
            logging.getLogger("stkrelay.client").setLevel(logging.ERROR)  # errors are one line of ours
        try:
            client = build_client(options, self._on_status)
            code = asyncio.run(getattr(self, f"_{options['action']}")(client, options))
        except Stop as stop:
            if stop.line:
                self._status({"error": stop.line}, stop.line)
            code = stop.code
        if code:
            raise SystemExit(code)

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
