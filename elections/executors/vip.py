"""The on-prem VIP executor: `assign_vip` / `release_vip`.

`assign_vip` runs `ip addr add <addr>/<prefix> dev <if>` (an address already
there is fine), then announces it with gratuitous ARP so that neighbours map
the address to this host's MAC at once:
- `arping`: `arping -U -c <n> -I <if> <addr>` (Debian's `iputils-arping`);
- `builtin`: this module's own sender, a raw AF_PACKET ARP request with sender
  and target both the VIP, run as `python -c` (no extra package);
- `auto` (default): `arping` if it is on PATH, else `builtin`; `off`: none.
`release_vip` runs `ip addr del` (an address already gone is fine).

`observe` (read-only, ADR 0011 phase 4) reads the interface (`ip -j addr show
dev <if>`: its MAC, and whether the VIP is on it), then probes the LAN for
every host that answers ARP for the VIP (`arp_probe`: an RFC 5227 probe,
`ARP_WINDOW` seconds, at most `MAX_ANSWERS` MACs), in this process, or as
`python -c` in `VIP_NETNS` (anyone on the LAN can answer, so what it finds is
shown, never acted on by itself).

Every command goes through an injectable runner; with `netns` it is prefixed
by `ip netns exec <ns>`, so tests run it inside namespaces they create.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

from elections.core.actions import ASSIGN_VIP, RELEASE_VIP, Action
from elections.core.ownership import MAX_HOLDERS, Sighting
from elections.executors.arp_probe import SCRIPT as ARP_SCRIPT
from elections.executors.arp_probe import arp_probe
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

ARP_WINDOW = 0.3  # seconds the probe listens for replies
MAX_ANSWERS = MAX_HOLDERS
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
        probe: Callable[[str, str, float, int], list[str]] | None = arp_probe,
    ) -> None:
        """`probe`: the in-process ARP probe (None: always `python -c`, as in a netns)."""
        self.runner = runner
        self.which = which
        self.python = python
        self.probe = probe

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

    def observe(self, args: dict[str, Any]) -> Sighting:
        """Where the VIP is, seen from this host (read-only; never raises)."""
        addr, iface = args["address"], args["interface"]
        try:
            r = self._run(["ip", "-j", "addr", "show", "dev", iface], args)
            [link] = json.loads(r.stdout)
            mac = str(link.get("address") or "")
            held = any(a.get("local") == addr for a in link.get("addr_info", []) if isinstance(a, dict))
        except (CommandFailed, ValueError, TypeError, AttributeError) as exc:
            why = _why(exc) if isinstance(exc, CommandFailed) else f"ip addr show {iface}: {_why(exc)}"
            return Sighting(self.name, addr, error=why)
        try:
            answered = self._probe(args)
            if not isinstance(answered, list) or not all(isinstance(m, str) and len(m) == 17
                                                         for m in answered):  # fmt: skip
                raise ValueError(f"unexpected probe output {r.stdout[:80]!r}")
        except (CommandFailed, OSError, ValueError, IndexError) as exc:
            own = (mac,) if held else ()
            return Sighting(self.name, addr, mac, held, own, False, f"arp probe: {_why(exc)}")
        others = sorted({m for m in answered if m != mac})[: MAX_ANSWERS - 1]
        return Sighting(self.name, addr, mac, held, (mac, *others) if held else tuple(others), True)

    def _probe(self, args: dict[str, Any]) -> Any:
        """The MACs answering for the VIP: in this process, or in its netns via `python -c`."""
        iface, addr = args["interface"], args["address"]
        if self.probe is not None and not args.get("netns"):
            return self.probe(iface, addr, ARP_WINDOW, MAX_ANSWERS)
        argv = [self.python, "-c", ARP_SCRIPT, iface, addr, str(ARP_WINDOW), str(MAX_ANSWERS)]
        return json.loads(self._run(argv, args).stdout.strip().splitlines()[-1])

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


def _why(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
