"""Sockets on this host that need an OS option: a UDP port shared by several
processes (Linux `SO_REUSEPORT`; never `SO_REUSEADDR` for UDP, docs/design.md §12)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

P = TypeVar("P", bound=asyncio.DatagramProtocol)


async def open_shared_udp(
    factory: Callable[[], P], host: str, port: int
) -> tuple[asyncio.DatagramTransport, P]:
    """A UDP endpoint on (host, port) that other processes of this host may bind too
    (the beacons of several agents on one test machine, a discovering client beside
    an agent), broadcast allowed."""
    loop = asyncio.get_running_loop()
    return await loop.create_datagram_endpoint(factory, local_addr=(host, port), reuse_port=True,
                                               allow_broadcast=True)  # fmt: skip
