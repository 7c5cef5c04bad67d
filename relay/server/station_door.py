"""The station door (issue 36): `127.0.0.1:RELAY_PORT` on every member reaches the relay of
whoever leads now, so the site's stations reach the elected relay with no line of their code
changed (they already fall back to ``127.0.0.1``; one line of stk.ini, ``RELAY_HOST = 127.0.0.1``,
makes it their first choice).

`python -m stkrelay.child relay.server.station_door` runs on every member whose `RELAY_FORWARD`
and `RELAY_LOOPBACK` give it somewhere to listen (`relay.server.listen_set.door_hosts`; the
supervisor starts it beside the standby relay, `elections.management.agent_root`):

- **Where.** ``127.0.0.1`` on `RELAY_PORT` (protocol v1, or whatever the site's relay speaks
  under ``RELAY_KIND = exec``) and ``RELAY_PORT + 1`` (passthrough), on the leader too: the relay
  then leaves loopback to the door (`listen_set.relay_loopback`), so the port stays bound through
  every change of role. With ``RELAY_FORWARD = lan`` also on a follower's `NODE_IP`, for a
  commander on a PC without an agent that lists two members as its relay and backup; given up
  while this member leads (its relay listens there: the relay retries a bind the door still held
  for a moment, `relay.runner.serve`) and taken again when another member leads.
- **To whom.** The relay the lease names, as this member's own worker last read it (the same
  `EntryGate` as an entry member: a fresh pool view naming a valid, unreleased lease). On the
  leader that is its own relay on `NODE_IP`.
- **Fenced.** No leader, a stale view, a released lease: an accepted connection is closed at
  once (a station's own backup address takes over; never a black hole), and every forwarded pair
  is closed; a new epoch or relay closes the pairs to the old one, so each station's own reconnect
  loop redials the door and reaches the new leader. Bytes pass untouched both ways (the
  `FencingProxy`, asked before every send), after a keyed PROXY v2 header on each connection the
  door opens (`relay.wire.proxy_header`): the relay, or the exec fencing proxy, which strips it,
  counts each station under its own address, not the door's.
- **This PC first.** With ``RELAY_FORWARD = lan``, LAN clients hold at most `LAN_SHARE` of the
  door's pairs (refused past it, counted ``lan_share``): a flood from many LAN addresses, each
  under its per-address cap, leaves room for the stations on this PC's loopback (with
  ``RELAY_LOOPBACK = off`` there is no loopback door: the LAN may hold them all).
- Where it stands: ``DATA_DIR/door.json`` every second; ``relayctl doctor`` reads it
  (`elections.web.panel.door_state`).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from elections.ports.local.pool_view import PoolView
from elections.ports.local.relay_files import EntryStatus
from relay.server.entry import EntryRunner, stale_after
from relay.server.listen_set import door_hosts
from stkconfig.model import Config

log = logging.getLogger("stkrelay.relay")

# Seconds a station's connection, accepted while a leader is known, may wait for that leader's relay
# to take it (refused: the new leader's relay is still starting; or held back while the leader is
# silent) before it is closed; a station's own keepalive may give up sooner.
WAIT_FOR_LEADER = 2.0


def quiet_leader(view: PoolView, node: str) -> bool:
    """Does this member's view say the beacons of `node`, the leader it follows, went quiet
    (`elections.ports.beacons.beacons.QUIET_INTERVALS`)? Never with beacons off."""
    return isinstance(view.beacons, dict) and view.beacons.get("quiet") == node


LAN_SHARE = 0.75  # of the door's pairs, what LAN clients (on NODE_IP) may hold: the rest is this PC's


class StationDoor(EntryRunner):
    """The entry's proxy and gate on this member's own addresses; `lan_host` is `NODE_IP` where
    the door takes it too (given up while the lease names this member)."""

    what = "station door"

    def __init__(
        self,
        data_dir: str,
        node: str,
        hosts: tuple[str, ...],
        port: int,
        stale_after: float,
        max_per_address: int = 0,
        lan_host: str | None = None,
        pool_key: str = "",
    ) -> None:
        first = next(h for h in hosts if h != lan_host) if any(h != lan_host for h in hosts) else None
        # `header_key`: on `NODE_IP`, another member's door may forward to this one while its lease
        # names this member before this door read it (or the reverse): its header is verified and
        # stripped, and this door's own names that door's client, so the relay reads one header.
        super().__init__(data_dir, (first or "", port), stale_after, max_per_address, pool_key=pool_key,
                         redial_within=WAIT_FOR_LEADER, header_key=pool_key or None, lan_host=lan_host,
                         lan_share=LAN_SHARE if first and lan_host else 1.0)  # fmt: skip
        self.node, self.port, self.lan_host = node, port, lan_host
        self.hosts = hosts
        self.lan_error = ""

    def held_back(self) -> bool:
        """A new station connection waits (up to `WAIT_FOR_LEADER`) before it dials a leader
        whose beacons went quiet: a frozen PC's kernel would complete its handshake and keep it
        until the station's own keepalive gives up, while the new leader, if one comes, is a
        beacon silence `S` away; held, it is led there at the re-point."""
        target = self.gate.target
        return target is not None and target.node != self.node and quiet_leader(self.gate.view, target.node)

    def shown(self) -> str:
        return ", ".join(f"{host}:{self.port}" for host in self.proxy.listening_on) or "nothing"

    async def start_listening(self) -> None:
        if self.listen[0]:
            await self.proxy.start(*self.listen)
        else:  # only NODE_IP (RELAY_LOOPBACK off, RELAY_FORWARD lan): taken while another member leads
            self.proxy.prepare(self.port)

    def follow(self) -> None:
        super().follow()
        if self.lan_host is not None:
            self.follow_lan(self.lan_host)

    def follow_lan(self, host: str) -> None:
        """Take `NODE_IP` while the lease names another member; give it up while it names this one."""
        target = self.gate.target
        mine = target is None or target.node == self.node or target.ip == host
        here = host in self.proxy.listening_on
        if mine and here:  # the connections it took there stay: re-pointed, they reach this relay
            self.proxy.stop_listening(host, address_left=False)
            log.info("station door: %s given up to this member's relay", host)
        elif not mine and not here:
            try:
                self.proxy.listen_now(host)
            except OSError as exc:  # the old relay of this member still holds it: again at the next tick
                why = exc.strerror or str(exc)
                if why != self.lan_error:
                    log.info("station door: cannot listen on %s:%d yet (%s)", host, self.port, why)
                self.lan_error = why
                return
            self.lan_error = ""
            log.info("station door: listening on %s:%d for %s's relay", host, self.port,
                     target.node if target is not None else "?")  # fmt: skip

    def write_status(self) -> None:
        try:
            self.local.write_door(self.snapshot())
        except OSError as exc:
            log.warning("station door: cannot write door.json in %s: %s", self.local.dir, exc)

    def snapshot(self) -> EntryStatus:
        status = super().snapshot()
        return replace(status, error=status.error or self.lan_error)


def main(stk: Config, argv: list[str] | None = None) -> int:
    """`python -m stkrelay.child relay.server.station_door`, with the configuration loaded."""
    import asyncio

    hosts = door_hosts(stk.node_ip, stk.relay_loopback, stk.relay_forward)
    if not hosts:
        print(f"station door: {stk.node} takes no station connections (RELAY_FORWARD = {stk.relay_forward}, "
              f"RELAY_LOOPBACK = {stk.relay_loopback}): nothing to do", flush=True)  # fmt: skip
        return 0
    lan = stk.node_ip if stk.node_ip in hosts else None
    door = StationDoor(stk.data_dir, stk.node, hosts, stk.relay_port,
                       stale_after(stk.lease_poll, stk.lease_ttl), stk.relay_max_per_address,
                       lan_host=lan, pool_key=stk.pool_key)  # fmt: skip
    return asyncio.run(door.run())
