"""What a caller can read of a relay client at any time (`relay.client.relay_client.RelayClient`).

A base class of `RelayClient` holding only read-only properties over the
client's follower (`relay.client.follow.Follower`), its live session
(`relay.client.session.Session`) and its outbox (`relay.client.outbox.Outbox`).
"""

from __future__ import annotations

from relay.client.discovery import Leader
from relay.client.follow import Follower
from relay.client.outbox import Outbox
from relay.client.session import Session


class ClientState:
    """Read-only views of a client; the attributes are set by `RelayClient`."""

    _follower: Follower
    _live: Session | None
    _outbox: Outbox
    _closed: bool

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def known_epoch(self) -> int | None:
        """The highest epoch seen (registrations, leases, leader_changed)."""
        return self._follower.known_epoch

    @property
    def last_reason(self) -> str:
        """Why the last attempt or session ended ("" before the first)."""
        return self._follower.last_reason

    @property
    def registered(self) -> bool:
        return self._live is not None

    @property
    def leader(self) -> Leader | None:
        return self._live.leader if self._live else None

    @property
    def epoch(self) -> int | None:
        """The server's epoch of the live session (None while not registered)."""
        return self._live.epoch if self._live else None

    @property
    def node(self) -> str | None:
        return self._live.node if self._live else None

    @property
    def session_id(self) -> str | None:
        return self._live.session if self._live else None

    @property
    def pending(self) -> int:
        """Messages waiting in the send queue (not written yet)."""
        return len(self._outbox.queue)

    @property
    def unconfirmed(self) -> int:
        """Messages written but not confirmed yet (they count against `queue_size` too)."""
        return len(self._outbox.window)
