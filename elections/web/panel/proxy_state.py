"""What the panel and /metrics show of the fencing proxy and the external relay behind it
(`RELAY_KIND = exec`, docs/design.md §16), from the relay runner's `relay.json` snapshot
(`relay.server.fencing_proxy.FencingProxy.snapshot()`, its ``external`` part from
`relay.server.external_relay.ExternalRelay.snapshot()`). Every field is read defensively.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elections.core.untrusted import as_int, as_object

MAX_CAUSES = 20


def _causes(value: Any) -> dict[str, int]:
    items = value.items() if isinstance(value, dict) else ()
    return {str(k)[:40]: as_int(v) for k, v in list(items)[:MAX_CAUSES]}


def _address(value: Any) -> str:
    if isinstance(value, list) and len(value) >= 2:
        return f"{str(value[0])[:64]}:{as_int(value[1])}"
    return "?"


@dataclass
class ProxyState:
    """The proxy's counters and the external relay's state."""

    command: str = ""
    accepting: bool = False  # the external relay accepts TCP on its port
    pid: int | None = None
    upstream: str = ""  # host:json-port/passthrough-port of the external relay
    listening: list[str] = field(default_factory=list)  # the proxy's own addresses
    connections: int = 0
    accepted: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    closed: dict[str, int] = field(default_factory=dict)
    bytes_up: int = 0  # clients -> external relay
    bytes_down: int = 0
    restarts: int = 0
    last_error: str = ""

    @classmethod
    def of(cls, snap: object) -> ProxyState | None:
        """From relay.json's snapshot; None unless it is the fencing proxy's (``kind`` = exec)."""
        if not isinstance(snap, dict) or snap.get("kind") != "exec":
            return None
        ext = as_object(snap.get("external"))
        up = as_object(snap.get("upstream"))
        listening = as_object(snap.get("listening"))
        pid = ext.get("pid")
        return cls(
            command=str(ext.get("command", ""))[:120],
            accepting=ext.get("accepting") is True,
            pid=as_int(pid, None),
            upstream=f"{str(up.get('host', ''))[:64]}:{as_int(up.get('json'))}/"
            f"{as_int(up.get('passthrough'))}",
            listening=[f"{str(name)[:16]} {_address(a)}" for name, a in list(listening.items())[:8]],
            connections=as_int(snap.get("connections")),
            accepted=as_int(snap.get("accepted")),
            refused=_causes(snap.get("refused")),
            closed=_causes(snap.get("closed")),
            bytes_up=as_int(snap.get("bytes_up")),
            bytes_down=as_int(snap.get("bytes_down")),
            restarts=as_int(ext.get("restarts")),
            last_error=str(ext.get("last_error", ""))[:300],
        )
