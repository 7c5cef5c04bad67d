"""The OCI executor: a secondary private IP that follows the leader (OCI CLI).

`assign_secondary_ip` runs

    oci network vnic assign-private-ip --vnic-id <vnic> --ip-address <ip>
        --unassign-if-already-assigned

The CLI looks the address up in the VNIC's subnet: already on this VNIC → no
action (exit 0, a note on stderr); on another VNIC → moved here (last writer
wins; a public IP assigned to it moves too); free → created here. On success
it prints the PrivateIp as JSON (`{"data": {"ip-address", "vnic-id", ...}}`),
which is checked to name this VNIC.

`release_secondary_ip` runs `oci network vnic unassign-private-ip --vnic-id
<vnic> --ip-address <ip>`; "was not found on VNIC" (already moved away) counts
as released.

`observe` (read-only, ADR 0011 phase 4) reads this VNIC's subnet once
(`oci network vnic get --vnic-id <vnic>`), then `oci network private-ip list
--subnet-id <subnet> --ip-address <ip> --all`: the VNIC(s) the address is on.

Commands go through an injectable runner (tests record the exact argv).
"""

from __future__ import annotations

import json
from typing import Any

from elections.core.actions import ASSIGN_IP, RELEASE_IP, Action
from elections.core.ownership import MAX_HOLDERS, Sighting
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

TIMEOUT = 60.0  # the CLI makes several API calls (get VNIC, list, create/update, get)


def assign_argv(cli: str, vnic_id: str, ip: str, reassign: bool = True) -> list[str]:
    argv = [cli, "network", "vnic", "assign-private-ip", "--vnic-id", vnic_id, "--ip-address", ip]
    return [*argv, "--unassign-if-already-assigned"] if reassign else argv


def unassign_argv(cli: str, vnic_id: str, ip: str) -> list[str]:
    return [cli, "network", "vnic", "unassign-private-ip", "--vnic-id", vnic_id, "--ip-address", ip]


class OciExecutor:
    name = "oci"
    verbs = frozenset({ASSIGN_IP, RELEASE_IP})

    def __init__(self, runner: Runner = run_command, timeout: float = TIMEOUT) -> None:
        self.runner = runner
        self.timeout = timeout
        self._subnets: dict[str, str] = {}  # vnic -> its subnet (never changes)

    def observe(self, args: dict[str, Any]) -> Sighting:
        """Which VNICs carry the address, from the subnet's private-IP list (never raises)."""
        cli, vnic, ip = args.get("cli") or "oci", args["vnic_id"], args["private_ip"]
        try:
            subnet = self._subnets.get(vnic)
            if subnet is None:
                doc = _data(self._run([cli, "network", "vnic", "get", "--vnic-id", vnic]).stdout, "vnic get")
                subnet = doc.get("subnet-id") if isinstance(doc, dict) else None
                if not isinstance(subnet, str) or not subnet:
                    raise CommandFailed("oci vnic get answered with no subnet-id")
                self._subnets[vnic] = subnet
            argv = [cli, "network", "private-ip", "list", "--subnet-id", subnet, "--ip-address", ip, "--all"]
            out = self._run(argv).stdout
            items = _data(out, "private-ip list") if out.strip() else []  # nothing printed: none found
            if not isinstance(items, list):
                raise CommandFailed("oci private-ip list answered with no list")
            holders = sorted({str(i["vnic-id"]) for i in items if isinstance(i, dict) and i.get("vnic-id")
                              and i.get("ip-address") == ip})  # fmt: skip
        except CommandFailed as exc:
            return Sighting(self.name, ip, vnic, error=str(exc))
        return Sighting(self.name, ip, vnic, vnic in holders, tuple(holders[:MAX_HOLDERS]), True)

    def apply(self, action: Action, recheck: Recheck = no_recheck) -> Outcome:
        a = action.args
        cli, vnic, ip = a.get("cli") or "oci", a["vnic_id"], a["private_ip"]
        if action.verb == ASSIGN_IP:
            argv = assign_argv(cli, vnic, ip, bool(a.get("unassign_if_already_assigned", True)))
            r = self._run(argv)
            if not r.stdout.strip():
                return applied(action, f"{ip} already on {vnic}: {summarize(r.stderr)}")
            holder = _vnic_of(r.stdout)
            if holder != vnic:
                raise CommandFailed(f"oci assign-private-ip answered with VNIC {holder!r}, not {vnic}")
            return applied(action, f"{ip} assigned to {vnic} (unassigned from any other VNIC first)")
        r = self._run(unassign_argv(cli, vnic, ip), ok_if="was not found on VNIC")
        if r.returncode:
            return applied(action, f"{ip} is not on {vnic} (any more): nothing to release")
        return applied(action, f"{ip} unassigned from {vnic}")

    def _run(self, argv: list[str], ok_if: str = "") -> Completed:
        r = self.runner(argv, self.timeout)
        if r.returncode and not (ok_if and ok_if in r.stderr):
            what = argv[3] if argv[3].endswith("private-ip") else " ".join(argv[2:4])  # or: vnic get
            raise CommandFailed(f"oci {what} exited {r.returncode}: {summarize(r.stderr or r.stdout)}")
        return r


def _vnic_of(stdout: str) -> str | None:
    try:
        doc = json.loads(stdout)
    except ValueError as exc:
        raise CommandFailed(f"oci assign-private-ip printed no JSON: {summarize(stdout)}") from exc
    data = doc.get("data") if isinstance(doc, dict) else None
    return data.get("vnic-id") if isinstance(data, dict) else None


def _data(stdout: str, what: str) -> Any:
    try:
        doc = json.loads(stdout)
    except ValueError as exc:
        raise CommandFailed(f"oci {what} printed no JSON: {summarize(stdout)}") from exc
    return doc.get("data") if isinstance(doc, dict) else None
