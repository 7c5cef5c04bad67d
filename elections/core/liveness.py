"""Positive evidence that the leader's agent is gone (docs/design.md §13). Pure.

Silence is never proof of death. Evidence needs the leader's *host* to answer
that its agent is gone, and the agent's own beacons to agree:

1. this follower holds (or tried to open) a TCP connection to the liveness
   port of the lease holder's supervisor (`runagent`, whose death kills every
   child it started), and the host answered: the connection **ended** (FIN or
   RST) or a reconnect was **refused** (RST: nothing listens) — at most
   `FRESH` seconds ago;
2. this follower had heard the holder beacon as leader of the very epoch the
   lease names, and since then no leader beacon of that boot for
   `SILENCE_INTERVALS` beacon intervals (the longer of ours and the gap we
   observe between its datagrams).

A connect that times out, an unreachable host, a stopped process (SIGSTOP:
the kernel still holds its sockets and keeps answering the handshake) or a
pulled cable give no answer and so no evidence: the TTL decides, as before.

`Liveness` records what the transport saw for the one target it watches;
`gone(board, node, epoch, now)` says whether the evidence holds, and why. The
elector hands the answer to `decide()` in the `Observation`; the store's
compare-and-set still decides who takes the lease.
"""

from __future__ import annotations

from dataclasses import dataclass

from elections.core.beacon_board import BeaconBoard

SILENCE_INTERVALS = 2.0
FRESH = 2.0  # seconds an answer of the host counts as current evidence

CONNECTING, CONNECTED, UNREACHABLE = "connecting", "connected", "unreachable"
ENDED, REFUSED = "ended", "refused"
ANSWERS = (ENDED, REFUSED)  # what the host says when nothing of the agent is left


@dataclass
class Liveness:
    interval: float  # this member's BEACON_INTERVAL
    node: str | None = None  # the member watched (the lease holder)
    address: tuple[str, int] | None = None
    state: str = CONNECTING
    at: float = 0.0  # when `state` was last entered or confirmed
    answers: int = 0  # ends and refusals seen, ever (for the panel)

    def watch(self, node: str | None, address: tuple[str, int] | None, now: float) -> bool:
        """Watch this member from now on; True if that is a change (reconnect)."""
        if (node, address) == (self.node, self.address):
            return False
        self.node, self.address, self.state, self.at = node, address, CONNECTING, now
        return True

    def saw(self, state: str, now: float) -> None:
        """The transport's news about the current target: CONNECTED, ENDED, REFUSED, UNREACHABLE."""
        if state in ANSWERS:
            self.answers += 1
        self.state, self.at = state, now

    def gone(self, board: BeaconBoard, node: str, epoch: int, now: float) -> str | None:
        """Why the holder `node` of `epoch` is gone, or None while there is no evidence."""
        if node != self.node or self.state not in ANSWERS or now - self.at > FRESH:
            return None
        stats = board.leader_beacon(node)
        if stats is None or stats.last.epoch != epoch or stats.leader_at is None:
            return None  # never heard it lead this epoch: it may not beacon at all
        quiet = now - stats.leader_at
        needed = SILENCE_INTERVALS * max(self.interval, stats.gap)
        if quiet < needed:
            return None
        what = "connection ended" if self.state == ENDED else "reconnect refused"
        return (f"{node}'s agent is gone: liveness {what} {now - self.at:.2f} s ago and no leader "
                f"beacon of epoch {epoch} (boot {stats.boot}) for {quiet:.2f} s")  # fmt: skip

    def to_doc(self, now: float) -> dict[str, object]:
        return {"node": self.node, "address": list(self.address) if self.address else None,
                "state": self.state, "age_s": round(now - self.at, 3), "answers": self.answers}  # fmt: skip
