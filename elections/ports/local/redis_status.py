"""`redis.json` in the data directory: whether this agent's own Redis answers, as its
supervisor (`runtime.redis_wait`) last found it, for `/healthz` and `relayctl doctor`.

Reading never raises: what is not a status reads as "not known" (`known` False).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from elections.core.untrusted import as_float, as_int, as_text
from stkhost.processes import pid_alive


@dataclass(frozen=True)
class RedisStatus:
    """`redis.json`: this agent's Redis, up or waited for since when."""

    pid: int | None = None  # the supervisor that wrote it
    url: str = ""  # REDIS_URL without its password (`ports.local.redis_link.shown_url`)
    up: bool = False
    since: float | None = None  # wall clock (time.time()) of the change to `up`: shown only, never compared
    tries: int = 0  # failed tries since then (while down)
    why: str = ""  # the last failure (while down)

    @property
    def known(self) -> bool:
        """Written by a supervisor that still runs (a stopped agent's file says nothing)."""
        return self.pid is not None and self.since is not None and pid_alive(self.pid)

    @property
    def waiting(self) -> bool:
        """The supervisor is waiting for its Redis now: the worker is held back."""
        return self.known and not self.up

    def since_iso(self) -> str:
        """`since` as ISO 8601 UTC to the second ("" if not known)."""
        if self.since is None:
            return ""
        return datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def to_doc(self) -> dict[str, object]:
        return {"pid": self.pid, "url": self.url, "up": self.up, "since": self.since, "tries": self.tries,
                "why": self.why}  # fmt: skip

    @classmethod
    def from_doc(cls, doc: dict[str, object]) -> RedisStatus:
        return cls(
            pid=as_int(doc.get("pid"), None),
            url=as_text(doc.get("url"))[:300],
            up=doc.get("up") is True,
            since=as_float(doc.get("since")),
            tries=as_int(doc.get("tries"), 0, minimum=0),
            why=as_text(doc.get("why"))[:300],
        )
