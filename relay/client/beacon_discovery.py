"""Finding the relay from the pool's leader beacons (docs/design.md §13), for
clients that do not mount the share: `relayclient --discover`, and any
`Discovery.build(beacons=BeaconListener(key, kmsn, port))`.

`BeaconListener.find()` listens on `BEACON_PORT` (any address, `reuse_port`,
so it works beside an agent on the same machine) for up to `wait` seconds.
A leader beacon of our KMSN that verifies with the client's key (the site
token, which is the pool key unless `POOL_KEY` is set apart) is returned at
once with its epoch. One that does not verify (a pool key the client does not
hold) is only a hint: its address is returned without an epoch once the wait
is over. Either way the beacon only says where to connect; the relay proves
itself in the authenticated handshake (protocol 1.1 `sauth`), and a server
that does not is dropped and avoided (`relay.client.follow`; counted in the
client's `counters.unproven`, the beacons refused in `refused` by cause). Beacons reach
the client by subnet broadcast, or by naming its address in `BEACON_PEERS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Collection

from elections.core.beacons import BEACON, LEADER, parse_beacon
from elections.core.untrusted import FORGED, UNSIGNED, Untrusted, load_object
from relay.client.discovery import Address, Leader
from stkhost.sockets import open_shared_udp

log = logging.getLogger("stkrelay.client")

WAIT = 1.0  # seconds to listen: five beacon intervals at the default 0.2 s


class _Collect(asyncio.DatagramProtocol):
    def __init__(self, listener: BeaconListener, avoid: Collection[Address]) -> None:
        self.listener = listener
        self.avoid = avoid
        self.verified: asyncio.Future[Leader] = asyncio.get_running_loop().create_future()
        self.hint: Leader | None = None
        self.heard = 0

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.heard += 1
        leader = self.listener.judge(data)
        if leader is None or leader.address in self.avoid:
            return
        if leader.epoch is not None:
            if not self.verified.done():
                self.verified.set_result(leader)
        else:
            self.hint = leader


class BeaconListener:
    name = "beacons"

    def __init__(self, key: str, kmsn: str, port: int, wait: float = WAIT, bind: str = "0.0.0.0") -> None:
        self.key = key
        self.kmsn = kmsn
        self.port = port
        self.wait = wait
        self.bind = bind
        self.last = "not asked yet"
        self.refused: Counter[str] = Counter()  # beacons not taken as verified, by cause

    def judge(self, data: bytes) -> Leader | None:
        """A leader beacon of our KMSN: with its epoch if it verifies, else a bare hint."""
        try:
            b = parse_beacon(data, self.key, self.kmsn)
        except Untrusted as exc:
            self.refused[exc.cause] += 1
            if exc.cause not in (FORGED, UNSIGNED):
                return None
            doc = load_object(data, BEACON, "beacon")  # parsed once already: cannot fail now
            ip, port = doc.get("ip"), doc.get("port")
            if doc.get("role") != LEADER or not isinstance(ip, str) or not isinstance(port, int):
                return None
            return Leader(ip, port, None, str(doc.get("node"))[:64], f"{self.name} (unverified)")
        if b.role != LEADER:
            return None
        return Leader(b.ip, b.port, b.epoch, b.node, self.name)

    async def find(self, avoid: Collection[Address] = ()) -> Leader | None:
        try:
            transport, proto = await open_shared_udp(lambda: _Collect(self, avoid), self.bind, self.port)
        except OSError as exc:
            self.last = f"cannot listen on {self.bind}:{self.port}: {exc.strerror or exc}"
            return None
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.wait):
                    leader = await asyncio.shield(proto.verified)
                self.last = f"leader beacon: {leader.describe()}"
                return leader
            if proto.hint is not None:
                self.last = f"an unverified leader beacon: {proto.hint.describe()}"
                return proto.hint
            self.last = f"no leader beacon on port {self.port} in {self.wait:g} s ({proto.heard} datagrams)"
            return None
        finally:
            transport.close()
            proto.verified.cancel()
