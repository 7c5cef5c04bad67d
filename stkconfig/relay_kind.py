"""The external-relay keys of `stk.ini` (docs/design.md §16, issue 19).

- `RELAY_KIND` (`builtin` | `exec`, default `builtin`): what the elected leader
  serves. `exec` runs the site's own relay (`RELAY_EXEC`) on loopback and puts
  stkrelay's fencing proxy (`relay.server.fencing_proxy`) where the built-in relay would
  listen (`stkrelay.E070`).
- `RELAY_EXEC`: the command line, split like a POSIX shell would split it
  (`shlex`, never run through a shell: no pipes, no `$VAR`, no globbing), with
  the placeholders `{host}`, `{port}`, `{passthrough_port}`, `{epoch}` and
  `{kmsn}` filled in at every start; `{{`/`}}` stand for literal braces.
  Required with `exec`, refused without it (`stkrelay.E071`); a line that does
  not split, or names an unknown placeholder, is `stkrelay.E072`/`E073`; a
  program that cannot be found is `stkrelay.E077`; the site's own `relay_server.py` run through
  `stkrelay-site-relay` (`relay.server.site_relay`; `stkconfig.site_relay_recipe`) that is not
  there is `stkrelay.E078`.
- `RELAY_EXEC_LISTEN` (`host:port`, default `127.0.0.1:` `RELAY_PORT + 10`):
  where the external relay listens (`{host}`, `{port}`; its passthrough port is
  `{port} + 1`). Loopback only: a foreign binary cannot fence itself, so
  nothing but the proxy may reach it (`stkrelay.E074`). Its two ports must not
  be the relay, web or beacon ports (`stkrelay.E075`).
- `exec` with `CLOUD_URL` is `stkrelay.E076`: the cloud tunnel multiplexes
  clients into the built-in relay's routing, which an external relay has not.

`parse(raw, known, bad)` (`stkconfig.raw`) reports each bad value through `bad`.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import shutil
import string
from dataclasses import dataclass
from typing import Protocol

from stkconfig.bad import Bad
from stkconfig.parsed import ExecRelay
from stkconfig.raw import Raw
from stkconfig.site_relay_recipe import source_of

KINDS = ("builtin", "exec")
PLACEHOLDERS = ("host", "port", "passthrough_port", "epoch", "kmsn")
PORT_OFFSET = 10  # RELAY_EXEC_LISTEN's default port: RELAY_PORT + 10


def placeholders(word: str) -> list[str]:
    """The placeholder fields of `word` as `str.format` reads them; a field with a conversion
    or a format spec (``{port!r}``, ``{port:>5}``) is given whole, so it is never a known name.
    Raises ValueError for an unbalanced brace."""
    return [
        field + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "")
        for _, field, spec, conv in string.Formatter().parse(word)
        if field is not None
    ]


@dataclass(frozen=True)
class RelayKind:
    relay_kind: str = "builtin"  # or exec
    relay_exec: ExecRelay | None = None  # with exec and sound keys: the command and its loopback address


class ExecNeeds(Protocol):
    """What the external relay's keys read of the sections before them."""

    relay_port: int
    web_port: int
    beacon_port: int
    cloud_url: str


def parse(raw: Raw, known: ExecNeeds, bad: Bad) -> RelayKind:
    """`RELAY_KIND` and, with `exec` and sound keys, the command and where it listens."""
    kind = raw.text("RELAY_KIND").strip().lower() or "builtin"
    if kind not in KINDS:
        bad("stkrelay.E070", "RELAY_KIND", f"{raw.text('RELAY_KIND')!r} is not a relay kind",
            "use builtin (stkrelay's relay) or exec (the site's own relay, RELAY_EXEC)")  # fmt: skip
        return RelayKind("builtin")
    if kind == "builtin":
        _builtin(raw, bad)
        return RelayKind(kind)
    return RelayKind(kind, _exec(raw, known, bad))


def _builtin(raw: Raw, bad: Bad) -> None:
    if raw.text("RELAY_EXEC").strip():
        bad("stkrelay.E071", "RELAY_EXEC", "is set but RELAY_KIND is builtin, so it would never run",
            "set RELAY_KIND = exec to run it, or remove RELAY_EXEC")  # fmt: skip


def _exec(raw: Raw, cfg: ExecNeeds, bad: Bad) -> ExecRelay | None:
    line, check_dirs = raw.text("RELAY_EXEC").strip(), raw.check_dirs
    if not line:
        bad("stkrelay.E071", "RELAY_EXEC", "is not set but RELAY_KIND is exec",
            "set RELAY_EXEC to the site's relay command, e.g. /opt/stk/relay --port {port}")  # fmt: skip
        return None
    argv = _split(line, bad)
    listen = _listen(raw.text("RELAY_EXEC_LISTEN"), cfg.relay_port, bad)
    if argv is None or listen is None:
        return None
    host, port = listen
    taken = {
        cfg.relay_port: "RELAY_PORT", cfg.relay_port + 1: "RELAY_PORT + 1 (passthrough)",
        cfg.web_port: "WEB_PORT", cfg.beacon_port: "BEACON_PORT",
    }  # fmt: skip
    clashes = [f"{p} is {taken[p]}" for p in (port, port + 1) if p in taken]
    if clashes:
        example = f"{host}:{cfg.relay_port + PORT_OFFSET}"
        bad("stkrelay.E075", "RELAY_EXEC_LISTEN", f"{host}:{port} (and :{port + 1}): {'; '.join(clashes)}",
            f"the proxy listens on RELAY_PORT and RELAY_PORT + 1; e.g. {example}")  # fmt: skip
        return None
    if cfg.cloud_url:
        bad("stkrelay.E076", "RELAY_KIND", "exec cannot carry the cloud tunnel (CLOUD_URL)",
            "the tunnel needs the built-in relay's routing: builtin, or no CLOUD_URL")  # fmt: skip
        return None
    if check_dirs and not _findable(argv[0]):
        bad("stkrelay.E077", "RELAY_EXEC", f"program {argv[0]!r} is not found or not executable",
            "give the full path of the site's relay binary (quote a path with spaces)")  # fmt: skip
        return None
    source = source_of(argv)  # the site's relay_server.py through stkrelay-site-relay
    if check_dirs and source is not None and not (os.path.isfile(source) and os.access(source, os.R_OK)):
        bad("stkrelay.E078", "RELAY_EXEC", f"the site relay source {source!r} is not a readable file",
            "mount the site's Relay folder into the image (e.g. -v W:\\Relay:/site/Relay:ro) and name "
            "its relay_server.py right after stkrelay-site-relay")  # fmt: skip
        return None
    return ExecRelay(tuple(argv), host, port)


def _split(line: str, bad: Bad) -> list[str] | None:
    try:
        argv = shlex.split(line, posix=True)
    except ValueError as exc:
        bad("stkrelay.E072", "RELAY_EXEC", f"does not split into words: {exc}",
            "close every quote; put a Windows path in single quotes: 'C:\\STK\\relay.exe'")  # fmt: skip
        return None
    if not argv or not argv[0]:
        bad("stkrelay.E072", "RELAY_EXEC", "names no program", "set the site's relay command")
        return None
    if "{" in argv[0] or "}" in argv[0]:
        bad("stkrelay.E073", "RELAY_EXEC", f"the program itself ({argv[0]!r}) holds a placeholder",
            "name the program literally; placeholders go in its arguments")  # fmt: skip
        return None
    known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
    for word in argv[1:]:
        try:
            fields = placeholders(word)
        except ValueError as exc:
            bad(
                "stkrelay.E073",
                "RELAY_EXEC",
                f"{word!r}: {exc}",
                f"placeholders are {known}; {{{{ }}}} for braces",
            )
            return None
        unknown = [f for f in fields if f not in PLACEHOLDERS]
        if unknown:
            bad("stkrelay.E073", "RELAY_EXEC", f"{word!r} names unknown placeholder {{{unknown[0]}}}",
                f"placeholders are {known}; {{{{ }}}} for literal braces")  # fmt: skip
            return None
    return argv


def _listen(text: str, relay_port: int, bad: Bad) -> tuple[str, int] | None:
    default_port = relay_port + PORT_OFFSET
    text = text.strip()
    if not text:
        if default_port + 1 > 65535:
            bad("stkrelay.E074", "RELAY_EXEC_LISTEN", f"the default port {default_port} is out of range",
                "set RELAY_EXEC_LISTEN to a loopback host:port, e.g. 127.0.0.1:9540")  # fmt: skip
            return None
        return "127.0.0.1", default_port
    host, sep, port_text = text.rpartition(":")
    host = host.strip().strip("[]")
    hint = f"a loopback host:port, e.g. 127.0.0.1:{default_port}"
    if not sep or not host:
        bad("stkrelay.E074", "RELAY_EXEC_LISTEN", f"{text!r} is not host:port", hint)
        return None
    try:
        address = ipaddress.ip_address(host)
        port = int(port_text)
    except ValueError:
        bad("stkrelay.E074", "RELAY_EXEC_LISTEN", f"{text!r} is not an IP address and a port", hint)
        return None
    if not address.is_loopback:
        bad("stkrelay.E074", "RELAY_EXEC_LISTEN", f"{host} is not a loopback address",
            "the external relay must be reachable through the fencing proxy only: " + hint)  # fmt: skip
        return None
    if not 1 <= port <= 65534:
        bad(
            "stkrelay.E074",
            "RELAY_EXEC_LISTEN",
            f"port {port} is out of range",
            "use 1..65534 (it uses port + 1 too)",
        )
        return None
    return str(address), port


def _findable(program: str) -> bool:
    if os.sep in program or (os.altsep and os.altsep in program):
        return os.path.isfile(program) and os.access(program, os.X_OK)
    return shutil.which(program) is not None
