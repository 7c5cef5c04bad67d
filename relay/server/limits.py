"""How many connections the relay holds, and whom it turns away (docs/design.md §8, §5.4).

Someone hostile on the LAN can open sockets faster than they time out. The
relay bounds three numbers, each sized from the process's file limit (the
soft ``RLIMIT_NOFILE``, read by the server at every accept) unless given:

- `Caps.total`: every accepted connection, both ports: 80 % of the soft limit
  (the rest is for the process's own files and the accepts in flight: the
  listen backlog is sized with `backlog()` to fit in that headroom);
- `Caps.preauth`: connections that have not registered yet: a quarter of
  `total`;
- `Caps.per_address`: connections from one source IP, registered or not:
  ``RELAY_MAX_PER_ADDRESS``, default half of `preauth`, so that one address
  alone can never fill the pre-auth pool.

What happens to a newcomer (`Admission.admit`):

1. over `per_address` -> refused: closed at once, without a frame (no error
   code of §8 fits "busy", and no ``hello`` has been sent), counted as
   ``per_address``;
2. `preauth` or `total` full -> the *oldest* unregistered connection is
   evicted to make room (the transport closes it with ``timeout``: its
   registration deadline is brought forward), counted as ``evicted``. A
   legitimate client registers within one round trip, so it is never the
   oldest for long: idle sockets, however many, cannot keep it out;
3. `total` full of *registered* connections -> refused like 1, counted as
   ``total``. Registered connections are never evicted.

Idle unregistered connections are also closed by the register timeout (5 s).
Pure bookkeeping: no sockets, no clock; the peers are opaque hashable objects.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

TOTAL_SHARE = 0.8  # of the soft file limit
PREAUTH_SHARE = 4  # total // PREAUTH_SHARE may be unregistered
MAX_BACKLOG = 1024


@dataclass(frozen=True)
class Caps:
    total: int
    preauth: int
    per_address: int

    @classmethod
    def sized(cls, nofile: int, per_address: int | None = None) -> Caps:
        """Caps for a process whose soft file limit is `nofile` (see the module docstring)."""
        total = max(16, int(nofile * TOTAL_SHARE))
        preauth = max(4, total // PREAUTH_SHARE)
        return cls(total, preauth, per_address if per_address else max(2, preauth // 2))

    def as_dict(self) -> dict[str, int]:
        return {"total": self.total, "preauth": self.preauth, "per_address": self.per_address}


def backlog(nofile: int) -> int:
    """A listen backlog that fits in the headroom `Caps.sized` leaves (two listeners)."""
    return max(16, min(MAX_BACKLOG, nofile // 10))


class Admission:
    """The accepted connections of one relay: by address, and the unregistered ones in age order.

    `caps` is asked at every `admit()` (the file limit may change while the
    relay runs). `refused` counts the turned-away and evicted connections by
    cause: ``total``, ``per_address``, ``evicted``.
    """

    def __init__(self, caps: Callable[[], Caps]) -> None:
        self.caps = caps
        self.members: dict[Hashable, str] = {}  # peer -> its source address
        self.by_address: dict[str, int] = {}
        self.waiting: dict[Hashable, None] = {}  # unregistered peers, oldest first
        self.refused = {"total": 0, "per_address": 0, "evicted": 0}
        self.last = Caps(0, 0, 0)
        self.holding: dict[str, int] = {}  # address -> connections over its cap waiting for a header

    def hold(self, address: str) -> bool:
        """Is a newcomer from `address` over its per-address cap to wait for its first bytes before
        `admit()` (relay.server.forwarded: a forwarder's burst, each connection naming its own
        client in a header not read yet)? Only while that address is full, and at most half of
        `preauth` such in all (they hold descriptors too: `total` leaves room for them); a
        forwarder may burst by `per_address` + that before any is refused. `unhold()` when decided."""
        caps = self.last = self.caps()
        if self.by_address.get(address, 0) < caps.per_address:
            return False  # room: admitted at once
        if sum(self.holding.values()) >= caps.preauth // 2:
            return False  # refused at once by admit()
        self.holding[address] = self.holding.get(address, 0) + 1
        return True

    def unhold(self, address: str) -> None:
        left = self.holding.get(address, 0) - 1
        if left > 0:
            self.holding[address] = left
        else:
            self.holding.pop(address, None)

    def admit(self, peer: Hashable, address: str) -> tuple[bool, Hashable | None]:
        """Take `peer` from `address`? Returns (accepted, a peer to evict now or None).

        An evicted peer is already forgotten here; the caller closes it.
        """
        caps = self.last = self.caps()
        if self.by_address.get(address, 0) >= caps.per_address:
            self.refused["per_address"] += 1
            return False, None
        evict: Hashable | None = None
        if len(self.members) >= caps.total or len(self.waiting) >= caps.preauth:
            if not self.waiting:
                self.refused["total"] += 1
                return False, None
            evict = next(iter(self.waiting))
            self.release(evict)
            self.refused["evicted"] += 1
        self.members[peer] = address
        self.by_address[address] = self.by_address.get(address, 0) + 1
        self.waiting[peer] = None
        return True, evict

    def readdress(self, peer: Hashable, address: str) -> bool:
        """`peer` is a forwarded client from `address` (relay.server.forwarded): count it there
        from now on, in its place among the unregistered. Over `per_address` there: refused
        like a newcomer (counted ``per_address``) and forgotten here; the caller closes it."""
        old = self.members.get(peer)
        if old is None:
            return False
        if old == address:
            return True
        caps = self.last = self.caps()
        if self.by_address.get(address, 0) >= caps.per_address:
            self.refused["per_address"] += 1
            self.release(peer)
            return False
        self._leave(old)
        self.members[peer] = address
        self.by_address[address] = self.by_address.get(address, 0) + 1
        return True

    def registered(self, peer: Hashable) -> None:
        """`peer` registered: it no longer counts as waiting (and cannot be evicted)."""
        self.waiting.pop(peer, None)

    def release(self, peer: Hashable) -> None:
        """`peer` is gone (or evicted); forgetting an unknown peer is a no-op."""
        address = self.members.pop(peer, None)
        self.waiting.pop(peer, None)
        if address is not None:
            self._leave(address)

    def _leave(self, address: str) -> None:
        left = self.by_address[address] - 1
        if left:
            self.by_address[address] = left
        else:
            del self.by_address[address]

    def snapshot(self) -> dict[str, object]:
        return {
            "limits": self.last.as_dict(),
            "refused": dict(self.refused),
            "preauth": len(self.waiting),
            "addresses": len(self.by_address),
            "holding": sum(self.holding.values()),
        }
