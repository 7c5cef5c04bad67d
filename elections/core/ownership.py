"""Where the leader's addresses really are: the ownership map (ADR 0011 phase 4).

Each executor's read-only `observe()` returns a `Sighting` from this node: is
the address on this node's NIC (`held`), which NIC that is (`nic`: the
interface's MAC for a VIP, the ENI / VNIC / NIC id in a cloud), and — where
the network can say — every NIC it is on (`holders`: the MACs that answered
an ARP probe for the VIP, the provider's list for a secondary IP). Every
member puts its sightings in its heartbeat (`holds`, `Sighting.report()`), so
each agent knows what the others see of themselves and which NIC is whose.

`ownership_map()` folds this agent's own sightings and the members' reports
into one `Entry` per address: the expected owner (the lease holder, at its
epoch), the members it is on, the NICs it is on that no member reports
(`foreign`), and a verdict:

| verdict    | the address is ... |
|------------|--------------------|
| `ok`       | on the expected owner only (or nowhere, with no leader) |
| `drift`    | on one member, not the expected owner |
| `orphan`   | on one host that is no member (a NIC no member reports) |
| `conflict` | on two or more hosts |
| `missing`  | nowhere, while a leader should hold it |
| `unknown`  | this agent could see nothing (its observation failed, and no report) |

A report is evidence only about where an address is shown; what an agent
*does* about it (`core.repair`) rests on its own sighting of itself. Pure:
no I/O, no clock.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

OK, DRIFT, ORPHAN, CONFLICT, MISSING, UNKNOWN = "ok", "drift", "orphan", "conflict", "missing", "unknown"
VERDICTS = (OK, DRIFT, ORPHAN, CONFLICT, MISSING, UNKNOWN)
ADDRESS_EXECUTORS = ("vip", "aws", "oci", "azure")  # the executors that move an address

# Bounds on what a heartbeat may say (a member's `holds`): more is not evidence.
MAX_REPORTS = 8
MAX_TEXT = 256
MAX_HOLDERS = 16


def nic_key(nic: str) -> str:
    """NICs compare case-blind (Azure ids, MACs)."""
    return nic.strip().lower()


@dataclass(frozen=True)
class Sighting:
    """What one executor's `observe()` saw of one address, from this node."""

    executor: str
    address: str
    nic: str = ""  # this node's NIC ("" when it could not be read)
    held: bool | None = None  # on this node's NIC; None: could not tell
    holders: tuple[str, ...] = ()  # every NIC the network shows it on (this node's included)
    complete: bool = False  # `holders` is a whole-network answer (ARP probe, provider list)
    error: str = ""  # what could not be seen, and why ("" = all of it was)

    @property
    def key(self) -> tuple[str, str]:
        return (self.executor, self.address)

    def report(self) -> dict[str, Any]:
        """This sighting as the heartbeat carries it (`holds`)."""
        doc: dict[str, Any] = {"executor": self.executor, "address": self.address, "nic": self.nic,
                               "held": self.held}  # fmt: skip
        if self.error:
            doc["error"] = self.error[:MAX_TEXT]
        return doc


@dataclass(frozen=True)
class HoldClaim:
    """One member's heartbeat claim about one address (parsed, bounded)."""

    node: str
    executor: str
    address: str
    nic: str
    held: bool | None
    error: str = ""


class BadReport(ValueError):
    """A heartbeat's `holds` that is not evidence (the whole field is refused)."""


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise BadReport(f"{what} is not text of at most {MAX_TEXT} characters")
    return value


def reports_of(node: str, doc: Mapping[str, Any]) -> list[HoldClaim]:
    """The `holds` of a member's heartbeat; `BadReport` if it is malformed in any
    way (not a list, too long, a field of the wrong type, an address that is not
    an IP): the caller counts it and takes none of it."""
    holds = doc.get("holds")
    if holds is None:
        return []
    if not isinstance(holds, list) or len(holds) > MAX_REPORTS:
        raise BadReport(f"holds is not a list of at most {MAX_REPORTS} reports")
    out = []
    for item in holds:
        if not isinstance(item, dict):
            raise BadReport("a report in holds is not an object")
        executor = _text(item.get("executor"), "executor")
        if executor not in ADDRESS_EXECUTORS:
            raise BadReport(f"executor {executor[:32]!r} moves no address")
        address = _text(item.get("address"), "address")
        try:
            address = str(ipaddress.ip_address(address))
        except ValueError:
            raise BadReport(f"address {address[:64]!r} is not an IP address") from None
        held = item.get("held")
        if held is not None and not isinstance(held, bool):
            raise BadReport("held is not true, false or null")
        error = item.get("error", "")
        out.append(HoldClaim(node, executor, address, _text(item.get("nic", ""), "nic"), held,
                          _text(error, "error") if error else ""))  # fmt: skip
    return out


@dataclass(frozen=True)
class Entry:
    """One address in the ownership map."""

    executor: str
    address: str
    verdict: str
    expected: str | None = None  # the lease holder, None without a live leader
    epoch: int | None = None
    holders: tuple[str, ...] = ()  # members it is on
    foreign: tuple[str, ...] = ()  # NICs it is on that no member reports
    errors: tuple[str, ...] = ()  # what could not be seen ("node: why")

    @property
    def key(self) -> tuple[str, str]:
        return (self.executor, self.address)

    @property
    def ok(self) -> bool:
        return self.verdict == OK

    def describe(self) -> str:
        """One line for `relayctl doctor` and the logs."""
        want = f"expected on {self.expected} (epoch {self.epoch})" if self.expected else "no leader"
        on = [*self.holders, *(f"{n} (no member)" for n in self.foreign)]
        seen = f"on {', '.join(on)}" if on else "on no host"
        line = f"{self.verdict}: {want}, {seen}"
        return line + (f"; not seen: {'; '.join(self.errors)}" if self.errors else "")

    def to_doc(self) -> dict[str, Any]:
        doc = asdict(self)
        for name in ("holders", "foreign", "errors"):
            doc[name] = list(doc[name])
        return doc

    @classmethod
    def from_doc(cls, doc: Any) -> Entry | None:
        """An entry from `pool.json` (this agent's own file); None if it is not one."""
        if not isinstance(doc, dict) or doc.get("verdict") not in VERDICTS:
            return None
        executor, address = doc.get("executor"), doc.get("address")
        if not (isinstance(executor, str) and isinstance(address, str)):
            return None
        epoch = doc.get("epoch")
        expected = doc.get("expected")

        def names(key: str) -> tuple[str, ...]:
            value = doc.get(key)
            return tuple(str(v) for v in value[:MAX_HOLDERS]) if isinstance(value, list) else ()

        return cls(
            executor, address, doc["verdict"],
            expected if isinstance(expected, str) else None,
            epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
            names("holders"), names("foreign"), names("errors"),
        )  # fmt: skip


def verdict(expected: str | None, holders: Iterable[str], foreign: Iterable[str], known: bool) -> str:
    """The table of the module docstring."""
    members, others = set(holders), set(foreign)
    if not known:
        return UNKNOWN
    count = len(members) + len(others)
    if count >= 2:
        return CONFLICT
    if count == 0:
        return MISSING if expected is not None else OK
    if others:
        return ORPHAN
    return OK if members == {expected} else DRIFT


def ownership_map(
    me: str,
    expected: str | None,
    epoch: int | None,
    mine: Sequence[Sighting],
    reports: Mapping[str, Sequence[HoldClaim]],
) -> list[Entry]:
    """One entry per address this agent or any member reports, sorted.

    `mine` is this agent's own fresh sightings; `reports` the members'
    heartbeat reports by node (this agent's own heartbeat is skipped: `mine`
    is newer). A member holds an address if this agent's whole-network
    sighting shows the NIC that member reports as its own; where there is no
    such sighting (or the member's NIC is unknown), if the member says so.
    """
    claims: list[HoldClaim] = [r for node, rs in reports.items() if node != me for r in rs]
    claims += [HoldClaim(me, s.executor, s.address, s.nic, s.held, s.error) for s in mine]
    keys = sorted({(r.executor, r.address) for r in claims})
    out = []
    for key in keys:
        about = [r for r in claims if (r.executor, r.address) == key]
        owners: dict[str, set[str]] = {}
        for r in about:
            if r.nic:
                owners.setdefault(nic_key(r.nic), set()).add(r.node)
        holders = {r.node for r in about if r.held is True}
        foreign: set[str] = set()
        errors = [f"{r.node}: {r.error}" for r in about if r.error]
        known = any(r.held is not None for r in about)
        for s in mine:
            if s.key != key or not s.complete:
                continue
            known = True
            # A whole-network look is fresher than any heartbeat: for every member whose NIC it
            # knows, it decides (a heartbeat written before a move must not place the address).
            decided = {next(iter(nodes)) for nodes in owners.values() if len(nodes) == 1}
            holders -= decided
            nics = [n for n in s.holders if nic_key(n) != nic_key(s.nic)]
            if s.held and s.nic:  # this agent's own NIC first: a flood of strangers never hides it
                nics.insert(0, s.nic)
            for nic in nics[:MAX_HOLDERS]:
                nodes = owners.get(nic_key(nic), set())
                if len(nodes) == 1:
                    holders |= nodes
                else:  # no member's NIC (or one that two members claim: no evidence for either)
                    foreign.add(nic)
                    if len(nodes) > 1:
                        errors.append(f"{nic} is reported by {', '.join(sorted(nodes))}")
        v = verdict(expected, holders, foreign, known)
        out.append(Entry(key[0], key[1], v, expected, epoch if expected else None, tuple(sorted(holders)),
                         tuple(sorted(foreign)), tuple(errors)))  # fmt: skip
    return out
