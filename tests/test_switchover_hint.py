"""A planned switchover's last step, from the old relay to the target's (issue 22):
the old leader's leadership state names the member it handed its lease to; its
relay, as its gate shuts, tells every client that member's address and epoch
(`leader_changed`), and the clients dial it at once and again every
`HINT_RETRY` while its relay is still coming up, without waiting out a backoff
or looking at discovery. Real sockets, a real relay server and real clients."""

from __future__ import annotations

import asyncio
import random

from test_relay_client import HOST_A, HOST_B, Pool, Relay, _kinds, dead_port, play, until

from elections.ports.local.localstate import Leadership, LocalState
from relay.client.discovery import Leader
from relay.client.follow import HINT_FRESH, HINT_RETRY, Follower, FollowerHooks, Redial
from relay.runner.gate import LeadershipGate


class HandingGate:
    """The old leader's gate: open, then shut with the handoff's target named (as the
    leadership state's `successor` says through `LeadershipGate.successor`)."""

    def __init__(self) -> None:
        self.open = True
        self.named: tuple[int, str, int] | None = None

    def __call__(self) -> bool:
        return self.open

    def successor(self) -> tuple[int, str, int] | None:
        return None if self.open else self.named


def test_the_old_relay_names_the_target_and_the_client_dials_it_at_once_while_it_comes_up(tmp_path):
    async def body(pool: Pool) -> None:
        gate = HandingGate()
        a = await pool.relay("S051", HOST_A, 7, gate)  # type: ignore[arg-type]
        pool.lease(a)  # the lease still names A throughout: only the hint leads to B
        port_b = dead_port(HOST_B)
        # A slow backoff: only the hint's quick redials reach B in time.
        client = pool.client("agent", "S003", backoff=Redial(initial=2.0, maximum=5.0, rng=random.Random(3)))
        await client.start(timeout=5)
        assert client.node == "S051"
        gate.named, gate.open = (8, HOST_B, port_b), False  # the worker stepped down, handing to B
        await client.send({"n": 1})  # A finds its gate shut as it routes: it tells and closes
        await until(lambda: not client.registered, 5, "the client to leave A")
        await until(lambda: len(_kinds(pool, "S003", "reconnecting")) >= 3, 5, "redials of B")
        b = Relay("S052", 8, HandingGate())  # B's relay comes up only now
        await b.server.start(HOST_B, port_b, 0)
        b.ip, b.port = b.server.addresses["json"]
        pool.relays.append(b)
        await until(lambda: client.registered and client.node == "S052", 5, "the client on B")
        assert client.epoch == 8
        redials = _kinds(pool, "S003", "reconnecting")
        assert "says the leader changed: epoch=8" in redials[0].reason
        assert all(s.delay is not None and s.delay <= HINT_RETRY for s in redials), redials

    play(tmp_path, body)


def test_the_leadership_gate_names_the_successor_only_once_it_no_longer_leads(tmp_path):
    local = LocalState(tmp_path)
    gate = LeadershipGate(tmp_path, 7)
    local.write_leadership(Leadership(node="S001", leader=True, epoch=7, successor=(8, "10.0.0.2", 9530)))
    assert gate.successor() is None  # still leading: nobody to name
    local.write_leadership(Leadership(node="S001", leader=False, successor=(8, "10.0.0.2", 9530)))
    assert gate.successor() == (8, "10.0.0.2", 9530)
    assert local.leadership().successor == (8, "10.0.0.2", 9530)  # through the file, as the relay reads it
    local.write_leadership(Leadership(node="S001", leader=False, successor=(7, "10.0.0.2", 9530)))
    assert gate.successor() is None  # not above this relay's epoch: no successor of it
    (tmp_path / "leadership.json").write_text('{"leader": false, "successor": [8, "", "x"]}')
    assert gate.successor() is None  # a malformed entry names nobody


def test_without_a_named_successor_the_relay_says_nulls_as_before(tmp_path):
    async def body(pool: Pool) -> None:
        gate = HandingGate()
        a = await pool.relay("S051", HOST_A, 7, gate)  # type: ignore[arg-type]
        pool.lease(a)
        client = pool.client("agent", "S004")
        await client.start(timeout=5)
        gate.open = False  # shut, naming nobody (a lost lease, a lapsed deadline)
        await client.send({"n": 1})
        await until(lambda: _kinds(pool, "S004", "reconnecting"), 5, "the client to leave A")
        assert "epoch=None" in _kinds(pool, "S004", "reconnecting")[0].reason

    play(tmp_path, body)


def test_a_lease_change_while_the_hint_is_dialed_delays_the_next_dial_no_longer_than_a_redial():
    """The lease watcher wakes a client between two dials when the lease changes (a
    switchover rewrites it twice: the release, then the target's lease). While a
    leader_changed hint is fresh the wait after that wake stays within HINT_RETRY; once
    it is stale, the backoff's own jitter applies again (the whole pool saw the lease)."""

    async def body() -> None:
        hooks = FollowerHooks(status=lambda *a, **k: None, changed=lambda: None, closed=lambda: False)
        backoff = Redial(initial=2.0, maximum=5.0, rng=random.Random(5))
        follower = Follower(None, backoff, 0.5, lambda leader, epoch: None, hooks, "test")  # type: ignore[arg-type]
        follower.set_hint(Leader(HOST_B, 9530, 8, None, "leader_changed"))
        follower.hint_until = asyncio.get_running_loop().time() + HINT_FRESH
        assert max(follower.after_wake() for _ in range(200)) <= HINT_RETRY
        follower.hint_until = asyncio.get_running_loop().time() - 0.001  # the hint went stale
        assert max(follower.after_wake() for _ in range(200)) > HINT_RETRY

    asyncio.run(body())
