"""The on-prem VIP executor: `assign_vip` / `release_vip`.

`assign_vip` runs `ip addr add <addr>/<prefix> dev <if>` (an address already
there is fine), then announces it with gratuitous ARP so that neighbours map
the address to this host's MAC at once:
- `arping`: `arping -U -c <n> -I <if> <addr>` (Debian's `iputils-arping`);
- `builtin`: this module's own sender, a raw AF_PACKET ARP request with sender
  and target both the VIP, run as `python -c` (no extra package);
- `auto` (default): `arping` if it is on PATH, else `builtin`; `off`: none.
`release_vip` runs `ip addr del` (an address already gone is fine).

Every command goes through an injectable runner; with `netns` it is prefixed
by `ip netns exec <ns>`, so tests run it inside namespaces they create.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

from elections.core.actions import ASSIGN_VIP, RELEASE_VIP, Action
from elections.executors.base import (
    CommandFailed,
    Completed,
    Outcome,
    Recheck,
    Runner,
    applied,
    no_recheck,
    run_command,
    summarize,
)

TIMEOUT = 10.0

# Kept free of imports from this package: it runs as `python -c` in the namespace.
GARP_SCRIPT = r"""
import socket, struct, sys, time
ifname, addr, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
s.bind((ifname, 0x0806))
mac = s.getsockname()[4]
ip = socket.inet_aton(addr)
arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + ip + b"\0" * 6 + ip
frame = b"\xff" * 6 + mac + struct.pack("!H", 0x0806) + arp
frame += b"\0" * (60 - len(frame))
for i in range(count):
    if i:
        time.sleep(0.2)
    s.send(frame)
print("sent %d gratuitous ARP(s) for %s from %s on %s" % (count, addr, mac.hex(":"), ifname))
"""

_EXISTS = ("File exists", "already assigned")
_ABSENT = ("Cannot assign requested address", "Address not found")


class VipExecutor:
    name = "vip"
    verbs = frozenset({ASSIGN_VIP, RELEASE_VIP})

    def __init__(
        self,
        runner: Runner = run_command,
        which: Callable[[str], str | None] = shutil.which,
        python: str = sys.executable,
    ) -> None:
        self.runner = runner
        self.which = which
        self.python = python

    def apply(self, action: Action, recheck: Recheck = no_recheck) -> Outcome:
        a = action.args
        cidr = f"{a['address']}/{a['prefix']}"
        iface = a["interface"]
        if action.verb == ASSIGN_VIP:
            r = self._run(["ip", "addr", "add", cidr, "dev", iface], a, ok_if=_EXISTS)
            added = "already on" if r.returncode else "added to"
            garp = self._garp(a)
            return applied(action, f"{cidr} {added} {iface}; {garp}")
        r = self._run(["ip", "addr", "del", cidr, "dev", iface], a, ok_if=_ABSENT)
        return applied(action, f"{cidr} {'was not on' if r.returncode else 'removed from'} {iface}")

    def garp_argv(self, args: dict[str, Any]) -> list[str] | None:
        """The command that announces the address, or None (mode `off`)."""
        mode = args.get("garp") or "auto"
        count = str(int(args.get("garp_count") or 1))
        if mode == "off":
            return None
        if mode == "auto":
            mode = "arping" if self.which("arping") else "builtin"
        if mode == "arping":
            return ["arping", "-U", "-c", count, "-I", args["interface"], args["address"]]
        return [self.python, "-c", GARP_SCRIPT, args["interface"], args["address"], count]

    def _garp(self, args: dict[str, Any]) -> str:
        argv = self.garp_argv(args)
        if argv is None:
            return "gratuitous ARP off"
        self._run(argv, args)
        tool = "arping" if argv[0] == "arping" else "built-in sender"
        return f"{args.get('garp_count') or 1} gratuitous ARP(s) sent ({tool})"

    def _run(self, argv: list[str], args: dict[str, Any], ok_if: Sequence[str] = ()) -> Completed:
        ns = args.get("netns") or ""
        r = self.runner(["ip", "netns", "exec", ns, *argv] if ns else argv, TIMEOUT)
        if r.returncode and not any(s in r.stderr + r.stdout for s in ok_if):
            where = f" (netns {ns})" if ns else ""
            what = " ".join(argv[:3]) if argv[0] == "ip" else argv[0].rsplit("/", 1)[-1]
            raise CommandFailed(f"{what}{where} exited {r.returncode}: {summarize(r.stderr or r.stdout)}")
        return r
