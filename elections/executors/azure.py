"""The Azure executor: a private IP that follows the leader between NICs.

Azure has no single reassign call. `assign_secondary_ip` therefore takes two
steps, each a read-modify-write of a whole NIC guarded by its ETag:
1. for every other NIC that holds the address: remove the ipConfiguration
   carrying it, `PUT` with `If-Match: <etag read>`;
2. on this agent's NIC: add (or repoint) the ipConfiguration `ip_config` with
   the address, static, in the subnet of the NIC's primary configuration,
   `PUT` with `If-Match`.
A `412 Precondition Failed` (someone changed the NIC since we read it) is met
by one fresh read and one retry; a second 412 fails the action. The epoch is
rechecked before every write, so a lease lost between the steps stops the rest.
`release_secondary_ip` is step 1 on this agent's own NIC.

`observe` (read-only, ADR 0011 phase 4) is `find_nics_with_ip`: every NIC
that carries the address (`az network nic list --query ...`).

The client is a port (`NicClient`: `find_nics_with_ip`, `get_nic`,
`update_nic`); `AzCliClient` implements it with `az rest` and
`az network nic list`. NIC documents are ARM's JSON (`properties.
ipConfigurations[].properties.privateIPAddress`, ...).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from elections.core.actions import ASSIGN_IP, RELEASE_IP, Action
from elections.core.ownership import MAX_HOLDERS, Sighting, nic_key
from elections.executors.base import (
    Completed,
    Outcome,
    PreconditionFailed,
    ProviderError,
    Recheck,
    Runner,
    applied,
    no_recheck,
    run_command,
    summarize,
)

log = logging.getLogger("stkrelay.actions")

API_VERSION = "2023-09-01"
Nic = dict[str, Any]


class NicClient(Protocol):
    def find_nics_with_ip(self, ip: str) -> list[str]:
        """Resource ids of the NICs that carry `ip` in an ipConfiguration."""
        ...

    def get_nic(self, nic_id: str) -> tuple[Nic, str]:
        """The NIC's ARM document and its current ETag."""
        ...

    def update_nic(self, nic_id: str, nic: Nic, etag: str) -> str:
        """PUT the document with `If-Match: etag`; the new ETag. Raises
        `PreconditionFailed` on HTTP 412, `ProviderError` on other refusals."""
        ...


class AzureExecutor:
    name = "azure"
    verbs = frozenset({ASSIGN_IP, RELEASE_IP})

    def __init__(self, client: NicClient | None = None, client_for: Callable[[str], NicClient] | None = None):
        """Either one `client`, or `client_for(cli)` building one per CLI path."""
        self.client = client
        self.client_for = client_for or (lambda cli: AzCliClient(cli=cli))

    def apply(self, action: Action, recheck: Recheck = no_recheck) -> Outcome:
        a = action.args
        nic, ip, name = a["nic_id"], a["private_ip"], a.get("ip_config") or "stkrelay-vip"
        client = self.client or self.client_for(a.get("cli") or "az")
        if action.verb == RELEASE_IP:
            if self._edit(client, nic, lambda doc: _without(doc, ip), recheck):
                return applied(action, f"{ip} removed from {_short(nic)}")
            return applied(action, f"{ip} is not on {_short(nic)} (any more): nothing to release")
        moved_from = []
        for other in client.find_nics_with_ip(ip):
            if other.lower() == nic.lower():
                continue
            if self._edit(client, other, lambda doc: _without(doc, ip), recheck):
                moved_from.append(_short(other))
        added = self._edit(client, nic, lambda doc: _with(doc, name, ip), recheck)
        where = f" (removed from {', '.join(moved_from)} first)" if moved_from else ""
        state = f"added to {_short(nic)} as {name!r}" if added else f"already on {_short(nic)}"
        return applied(action, f"{ip} {state}{where}", moved_from=moved_from)

    def observe(self, args: dict[str, Any]) -> Sighting:
        """Which NICs carry the address (read-only; never raises)."""
        nic, ip = args["nic_id"], args["private_ip"]
        try:
            client = self.client or self.client_for(args.get("cli") or "az")
            holders = sorted({str(n) for n in client.find_nics_with_ip(ip)}, key=nic_key)
        except ProviderError as exc:
            return Sighting(self.name, ip, nic, error=str(exc))
        except Exception as exc:
            return Sighting(self.name, ip, nic, error=f"{type(exc).__name__}: {exc}")
        held = nic_key(nic) in {nic_key(n) for n in holders}
        return Sighting(self.name, ip, nic, held, tuple(holders[:MAX_HOLDERS]), True)

    def _edit(
        self, client: NicClient, nic_id: str, change: Callable[[Nic], Nic | None], recheck: Recheck
    ) -> bool:
        """Read, change, write with If-Match; one re-read and retry on 412.
        False if the NIC was already as wanted (nothing written)."""
        for attempt in (1, 2):
            doc, etag = client.get_nic(nic_id)
            new = change(copy.deepcopy(doc))
            if new is None:
                return False
            recheck()
            try:
                client.update_nic(nic_id, new, etag)
                return True
            except PreconditionFailed as exc:
                if attempt == 2:
                    raise PreconditionFailed(
                        f"{_short(nic_id)} changed again while we wrote it (HTTP 412 twice, "
                        f"If-Match {etag}): gave up after one re-read"
                    ) from exc
                log.warning("%s changed since read (412, If-Match %s): re-reading once", _short(nic_id), etag)
        raise AssertionError("unreachable")


def _configs(doc: Nic) -> list[dict[str, Any]]:
    return doc.setdefault("properties", {}).setdefault("ipConfigurations", [])


def _ip_of(cfg: dict[str, Any]) -> str | None:
    return (cfg.get("properties") or {}).get("privateIPAddress")


def _without(doc: Nic, ip: str) -> Nic | None:
    configs = _configs(doc)
    keep = [c for c in configs if _ip_of(c) != ip]
    if len(keep) == len(configs):
        return None
    if any((c.get("properties") or {}).get("primary") for c in configs if _ip_of(c) == ip):
        raise ProviderError(f"{ip} is the primary address of {_short(doc.get('id', '?'))}: not movable")
    doc["properties"]["ipConfigurations"] = keep
    return doc


def _with(doc: Nic, name: str, ip: str) -> Nic | None:
    configs = _configs(doc)
    if any(_ip_of(c) == ip for c in configs):
        return None
    primaries = [c for c in configs if (c.get("properties") or {}).get("primary")] or configs[:1]
    primary = primaries[0] if primaries else None
    subnet = ((primary or {}).get("properties") or {}).get("subnet")
    if not subnet:
        raise ProviderError(f"{_short(doc.get('id', '?'))} has no primary ipConfiguration with a subnet")
    props = {"privateIPAddress": ip, "privateIPAllocationMethod": "Static", "primary": False}
    props["subnet"] = subnet
    existing = next((c for c in configs if c.get("name") == name), None)
    if existing is not None:
        existing.setdefault("properties", {}).update(props)
    else:
        configs.append({"name": name, "properties": props})
    return doc


def _short(nic_id: str) -> str:
    return nic_id.rsplit("/", 1)[-1] or nic_id


class AzCliClient:
    """`NicClient` over the Azure CLI: `az rest` GET/PUT on the NIC's ARM URL
    (PUT with an If-Match header), and `az network nic list` to find holders."""

    def __init__(
        self,
        runner: Runner = run_command,
        cli: str = "az",
        api_version: str = API_VERSION,
        timeout: float = 60.0,
    ) -> None:
        self.runner = runner
        self.cli = cli
        self.api_version = api_version
        self.timeout = timeout

    def url(self, nic_id: str) -> str:
        return f"https://management.azure.com{nic_id}?api-version={self.api_version}"

    def find_nics_with_ip(self, ip: str) -> list[str]:
        ip = str(ipaddress.ip_address(ip))  # never an arbitrary string inside the query
        query = f"[?ipConfigurations[?privateIPAddress=='{ip}']].id"
        ids = self._json([self.cli, "network", "nic", "list", "--query", query, "--output", "json"])
        return [str(i) for i in ids] if isinstance(ids, list) else []

    def get_nic(self, nic_id: str) -> tuple[Nic, str]:
        doc = self._json([self.cli, "rest", "--method", "get", "--url", self.url(nic_id)])
        if not isinstance(doc, dict) or not doc.get("etag"):
            raise ProviderError(f"az rest GET {_short(nic_id)} returned no NIC with an etag")
        return doc, doc["etag"]

    def update_nic(self, nic_id: str, nic: Nic, etag: str) -> str:
        argv = [self.cli, "rest", "--method", "put", "--url", self.url(nic_id),
                "--headers", json.dumps({"If-Match": etag}), "--body", json.dumps(nic)]  # fmt: skip
        r = self.runner(argv, self.timeout)
        if r.returncode:
            text = r.stderr or r.stdout
            if "Precondition Failed" in text or "(412)" in text or "PreconditionFailed" in text:
                raise PreconditionFailed(f"{_short(nic_id)}: {summarize(text)}")
            raise ProviderError(f"az rest PUT {_short(nic_id)} failed: {summarize(text)}")
        doc = _parse(r)
        return str(doc.get("etag", "")) if isinstance(doc, dict) else ""

    def _json(self, argv: list[str]) -> Any:
        r = self.runner(argv, self.timeout)
        if r.returncode:
            raise ProviderError(f"az {argv[1]} {argv[2]} failed: {summarize(r.stderr or r.stdout)}")
        return _parse(r)


def _parse(r: Completed) -> Any:
    try:
        return json.loads(r.stdout) if r.stdout.strip() else None
    except ValueError as exc:
        raise ProviderError(f"az printed no JSON: {summarize(r.stdout)}") from exc
