"""`python -m stkrelay.web`: the agent's web child, Daphne's own command line with
the access log written to a size-rotated file.

    python -m stkrelay.web --access-log PATH --log-max-bytes N --log-backups K [daphne args...]

Daphne opens `--access-log` once and appends forever; here the same NCSA lines
go through `logging.handlers.RotatingFileHandler` instead (PATH, PATH.1 ... PATH.K,
each at most N bytes; `LOG_MAX_BYTES`, `LOG_BACKUPS`). Its `ssl:` endpoint answers plain HTTP
with a redirect to https (`stkrelay.plain_hint`) instead of an empty reply. Everything else is Daphne's.

Nor does it load what autobahn (Daphne's WebSocket protocol) imports only because it
is installed (issue 41): click, to colour its own log lines, and cbor2, for WAMP
messages, which Daphne never speaks (~1 MiB); both imports are guarded there.
"""

from __future__ import annotations

import argparse
import logging
import sys
from functools import partial
from logging.handlers import RotatingFileHandler
from typing import Any

from elections.core.terminal import terminal_safe

UNUSED = ("click", "cbor2")


class RotatingLog:
    """A write()-able text stream over a RotatingFileHandler: one record per line."""

    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        self.handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self.handler.setFormatter(logging.Formatter("%(message)s"))

    def write(self, text: str) -> int:
        for line in text.splitlines():  # a request's path is the client's: escaped (core.terminal)
            self.handler.emit(
                logging.LogRecord("access", logging.INFO, "", 0, terminal_safe(line), None, None)
            )
        return len(text)

    def flush(self) -> None:
        self.handler.flush()


def _server(stream: RotatingLog, **kwargs: Any) -> Any:
    from daphne.access import AccessLogGenerator
    from daphne.server import Server

    return Server(**{**kwargs, "action_logger": AccessLogGenerator(stream)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--access-log", required=True)
    parser.add_argument("--log-max-bytes", type=int, default=10 << 20)
    parser.add_argument("--log-backups", type=int, default=5)
    ours, daphne_args = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    for unused in UNUSED:  # an import of it fails: autobahn then does without, as if absent
        sys.modules.setdefault(unused, None)  # type: ignore[arg-type]
    import daphne.server
    from daphne.cli import CommandLineInterface
    from django.conf import settings

    from elections.management.migrations_due import wait_migrated
    from stkrelay.plain_hint import server_from_string

    cli = CommandLineInterface()
    cli.server_class = partial(_server, RotatingLog(ours.access_log, ours.log_max_bytes, ours.log_backups))
    # Daphne builds its endpoints with this name: its `ssl:` ones answer plain HTTP with a redirect.
    daphne.server.serverFromString = server_from_string(daphne.server.serverFromString)
    wait_migrated(settings.STK.data_dir)  # a first start's migrate child, started beside this one
    cli.run(daphne_args)


if __name__ == "__main__":
    main()
