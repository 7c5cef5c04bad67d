"""The site's own relay, from its own source (issue 36): run `Relay/relay_server.py` — the Python
program the site's `relay_server.exe` is a PyInstaller build of — as ``RELAY_KIND = exec``, with
the ports it was written for moved to where the fencing proxy expects it.

    RELAY_KIND = exec
    RELAY_EXEC = stkrelay-site-relay /site/Relay/relay_server.py --host {host} --port {port}
                 --passthrough-port {passthrough_port}     (one line in stk.ini)
    RELAY_EXEC_LISTEN = 127.0.0.1:9540

The site's program binds its own ports (9530 for its protocol, 9531 for H.264 passthrough, seed
000 §2), on every address, as it always has: the door and the proxy hold those now. This launcher
runs the source unchanged in this interpreter (`runpy`, with its own folder as the working
directory and on `sys.path`, as its ``.exe`` would run beside its files) and moves each bind of
`--site-port` to ``{host}:{port}`` and of `--site-passthrough-port` to ``{host}:{passthrough_port}``
(loopback: only the fencing proxy reaches it); any other bind is the program's own business.
Arguments after ``--`` are the program's.

Standard library only: the image's Python runs it as a script or as
``python -m relay.server.site_relay``; ``stkrelay-site-relay`` is the same (pyproject's scripts).
`stkconfig.site_relay_recipe` reads which source a recipe names, and `stkconfig.relay_kind` checks
it is there before the first election (E078).
"""

from __future__ import annotations

import argparse
import os
import runpy
import socket
import sys
from collections.abc import Sequence
from typing import Any

SITE_PORT = 9530  # the seed's RELAY_PORT; passthrough is the next one


def moved(address: Any, ports: dict[int, int], host: str) -> Any:
    """Where a bind of `address` goes: `(host, ports[port])` for a site port, else unchanged."""
    if isinstance(address, tuple) and len(address) >= 2 and address[1] in ports:
        return (host, ports[address[1]], *address[2:])
    return address


def install(ports: dict[int, int], host: str) -> None:
    """Every socket bound in this process from now on goes through `moved`."""
    bind = socket.socket.bind

    def moved_bind(self: socket.socket, address: Any) -> None:
        where = moved(address, ports, host)
        if where != address and self.family == socket.AF_INET6 and ":" not in host:
            raise OSError(f"site relay: an IPv6 bind of port {address[1]} cannot be moved to {host}")
        bind(self, where)

    socket.socket.bind = moved_bind  # type: ignore[assignment]  # a patch of the socket class


def launcher_parser() -> argparse.ArgumentParser:
    """The launcher's arguments; `stkconfig.site_relay_recipe.VALUED` names its options that take
    a value (`tests/test_site_relay.py` keeps the two in step)."""
    parser = argparse.ArgumentParser(prog="stkrelay-site-relay", description=__doc__.splitlines()[0])
    parser.add_argument("source", help="the site's relay_server.py")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--passthrough-port", type=int, required=True)
    parser.add_argument("--site-port", type=int, default=SITE_PORT)
    parser.add_argument("--site-passthrough-port", type=int, default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = launcher_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    ours, program_args = (
        (words[: words.index("--")], words[words.index("--") + 1 :]) if "--" in words else (words, [])
    )
    args = parser.parse_args(ours)
    source = os.path.abspath(args.source)
    if not os.path.isfile(source):
        print(f"site relay: {source} is not there (is the site's Relay folder mounted?)", file=sys.stderr)
        return 2
    site_raw = args.site_passthrough_port or args.site_port + 1
    install({args.site_port: args.port, site_raw: args.passthrough_port}, args.host)
    print(f"site relay: {source}: its :{args.site_port} on {args.host}:{args.port}, "
          f":{site_raw} on {args.host}:{args.passthrough_port}", flush=True)  # fmt: skip
    folder = os.path.dirname(source)
    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.argv = [source, *program_args]
    runpy.run_path(source, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
