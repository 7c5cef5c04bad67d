"""What the panel shows about the leader's relay and its cloud tunnel, from the
relay's own `DATA_DIR/relay.json` (written by it every second while it serves;
older than 3 s is stale). Every field is read defensively: the file is this
agent's, but a relay that crashed mid-write or an older version must not break
a page. The message rate is measured between two observations of this web
process, on this machine's monotonic clock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy

from elections.core.untrusted import as_int, as_list, as_object
from elections.ports.local.localstate import RelayStatus
from elections.web.panel.proxy_state import ProxyState

_lock = threading.Lock()
_relay_samples: dict[Any, tuple[float, int, float | None]] = {}


@dataclass
class TunnelState:
    """The leader's outbound tunnel to the cloud relay (docs/design.md §14), from relay.json."""

    state: str
    url: str = ""
    connected: bool = False
    epoch: int = 0
    age_s: float | None = None
    remote_clients: int = 0
    streams: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    reconnects: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    last_error: str = ""

    @classmethod
    def of(cls, doc: object) -> TunnelState | None:
        """From the relay's snapshot["tunnel"], defensive about every field; None without one."""
        if not isinstance(doc, dict):
            return None
        age = doc.get("age_s")
        refusals = as_object(doc.get("refusals"))
        return cls(
            state=str(doc.get("state", "?"))[:40],
            url=str(doc.get("url", ""))[:200],
            connected=doc.get("connected") is True,
            epoch=as_int(doc.get("epoch")),
            age_s=float(age) if isinstance(age, int | float) and not isinstance(age, bool) else None,
            remote_clients=as_int(doc.get("remote_clients")),
            streams=as_int(doc.get("streams")),
            bytes_in=as_int(doc.get("bytes_in")),
            bytes_out=as_int(doc.get("bytes_out")),
            reconnects=as_int(doc.get("reconnects")),
            refusals={str(k)[:40]: as_int(v) for k, v in list(refusals.items())[:20]},
            last_error=str(doc.get("last_error", ""))[:300],
        )


@dataclass(frozen=True)
class RelaySession:
    """One registered client of the relay, and the key it authenticated with."""

    station: str
    role: str
    key: str  # "station" (its station credential) | "token" (the site-wide RELAY_TOKEN)
    peer: str

    @property
    def uses_token(self) -> bool:
        return self.key != "station"


MAX_SESSIONS_SHOWN = 500


# relay.server.listen_set's codes; in English the code itself, as relayctl and the API say it
_LISTEN_WHY = {
    "node": pgettext_lazy("why the relay listens there", "node"),
    "loopback": pgettext_lazy("why the relay listens there", "loopback"),
    "vip": pgettext_lazy("why the relay listens there", "vip"),
    "secondary_ip": pgettext_lazy("why the relay listens there", "secondary_ip"),
}
_LISTEN_STATE = {
    "listening": pgettext_lazy("the relay on one address", "listening"),
    "waiting": pgettext_lazy("the relay on one address", "waiting"),
    "failed": pgettext_lazy("the relay on one address", "failed"),
}


@dataclass(frozen=True)
class ListenEntry:
    """One address the relay wants to listen on (relay.server.listen_set), and whether it does."""

    address: str
    why: str  # node | loopback | vip | secondary_ip
    state: str  # listening | waiting | failed
    error: str = ""

    @property
    def up(self) -> bool:
        return self.state == "listening"

    @property
    def why_shown(self) -> str:
        """Why the relay listens there, in the reader's language (an unknown code as written)."""
        word = _LISTEN_WHY.get(self.why)
        return str(word) if word is not None else self.why

    @property
    def state_shown(self) -> str:
        word = _LISTEN_STATE.get(self.state)
        return str(word) if word is not None else self.state

    @classmethod
    def of(cls, doc: object) -> ListenEntry | None:
        if not isinstance(doc, dict) or not isinstance(doc.get("address"), str):
            return None
        return cls(doc["address"][:64], str(doc.get("why", ""))[:16], str(doc.get("state", ""))[:16],
                   str(doc.get("error", ""))[:200])  # fmt: skip


MAX_LISTEN_SHOWN = 32


@dataclass(frozen=True)
class LegacyState:
    """Old stations on this relay (``RELAY_LEGACY = 1``), from relay.json's ``legacy``."""

    sessions: int
    registered: int
    refused: dict[str, int]

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    @classmethod
    def of(cls, doc: Any) -> LegacyState | None:
        if not isinstance(doc, dict) or doc.get("enabled") is not True:
            return None
        refused = as_object(doc.get("refused"))
        shown = {str(k)[:32]: as_int(v) for k, v in list(refused.items())[:16]}
        return cls(as_int(doc.get("sessions")), as_int(doc.get("registered")), shown)


@dataclass
class RelayState:
    """The leader's relay, from its relay.json (only on the leading agent)."""

    running: bool
    why: str = ""
    pid: Any = None
    epoch: Any = None
    clients: int = 0
    per_station: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    connections: int = 0
    unregistered: int = 0
    messages: int = 0
    deliveries: int = 0
    bytes: int = 0
    no_route: int = 0
    rate: float | None = None  # messages/s between two observations
    drops: dict[str, int] = field(default_factory=dict)
    age: float | None = None
    tunnel: TunnelState | None = None  # CLOUD_URL set: the tunnel to the cloud relay
    proxy: ProxyState | None = None  # RELAY_KIND = exec: the fencing proxy and the external relay
    sessions: list[RelaySession] = field(default_factory=list)  # of this pool, by station and role
    listen: list[ListenEntry] = field(default_factory=list)  # where it listens: NODE_IP, loopback, VIP...
    legacy: LegacyState | None = None  # RELAY_LEGACY = 1: old stations (relay.wire.legacy)

    @property
    def token_sessions(self) -> int:
        """Sessions (not viewers) that authenticated with the site token: each should get a credential."""
        return sum(1 for s in self.sessions if s.uses_token and s.role != "viewer")

    @property
    def drops_total(self) -> int:
        return sum(v for v in self.drops.values() if isinstance(v, int))


def relay_state(status: RelayStatus, kmsn: str, now: float) -> RelayState:
    """The relay as its status file describes it; defensive about every field."""
    if not status.exists:
        return RelayState(False, _("no relay status (relay.json) on this agent"))
    age = status.age(now)
    proxy = ProxyState.of(status.snapshot)
    if not status.listening:
        why = _("relay not listening")
        if proxy is not None and status.pid is not None:
            why = _("the external relay %(command)s does not accept yet (%(error)s)") % {
                "command": proxy.command, "error": proxy.last_error or _("starting")}  # fmt: skip
        return RelayState(False, why, pid=status.pid, epoch=status.epoch, age=age, proxy=proxy)
    if age is None or age > 3.0:
        return RelayState(False, _("relay status is stale"), pid=status.pid, epoch=status.epoch, age=age)
    snap = status.snapshot
    counts = as_object(snap.get("counts"))
    stations = as_object(counts.get(kmsn))
    per_station = []
    for station, roles in sorted(stations.items()):
        if isinstance(roles, dict):
            per_station.append((str(station), {str(r): as_int(n) for r, n in sorted(roles.items())}))
    relayed = as_object(snap.get("relayed"))
    drops = as_object(snap.get("drops"))
    messages = as_int(relayed.get("messages"))
    clients = as_list(snap.get("clients"))
    sessions = [
        RelaySession(str(c.get("station", ""))[:64], str(c.get("role", ""))[:16],
                     "station" if c.get("key") == "station" else "token", str(c.get("peer", ""))[:80])
        for c in clients[:MAX_SESSIONS_SHOWN]
        if isinstance(c, dict) and c.get("kmsn") == kmsn
    ]  # fmt: skip
    listen = as_list(snap.get("listen"))
    entries = [e for e in (ListenEntry.of(d) for d in listen[:MAX_LISTEN_SHOWN]) if e is not None]
    assert status.updated is not None
    rate = _rate(status.pid, status.updated, messages)
    return RelayState(
        True,
        pid=status.pid,
        epoch=status.epoch,
        clients=sum(sum(r.values()) for _, r in per_station),
        per_station=per_station,
        connections=as_int(snap.get("connections")),
        unregistered=as_int(snap.get("unregistered")),
        messages=messages,
        deliveries=as_int(relayed.get("deliveries")),
        bytes=as_int(relayed.get("bytes")),
        no_route=as_int(relayed.get("no_route")),
        rate=rate,
        drops={str(k): as_int(v) for k, v in drops.items()},
        age=age,
        tunnel=TunnelState.of(snap.get("tunnel")),
        sessions=sessions,
        listen=entries,
        legacy=LegacyState.of(snap.get("legacy")),
        proxy=proxy,
    )


def _rate(key: Any, updated: float, messages: int) -> float | None:
    """Messages/s between the last two observations at least 1 s apart."""
    with _lock:
        prev = _relay_samples.get(key)
        if prev is None or messages < prev[1]:
            _relay_samples[key] = (updated, messages, None)
            return None
        if updated - prev[0] < 1.0:
            return prev[2]
        rate = (messages - prev[1]) / (updated - prev[0])
        _relay_samples[key] = (updated, messages, rate)
        return rate
