"""A LAN sniffer on loopback: every TCP payload to or from one port, as the kernel copies it.

An AF_PACKET socket on `lo` (root) sees each IPv4 packet that crosses it, as a
sniffer on a LAN segment sees each frame; `Sniffer.stop()` drains what is
queued and returns each direction of each TCP connection reassembled in
sequence order (retransmissions and the second copy `lo` shows of each packet
fall on the same sequence numbers), so a secret split across segments is still
found. A packet the kernel dropped for want of buffer would make the capture
incomplete: `stop()` raises then (`PACKET_STATISTICS`), never a silent pass.

    with Sniffer(port) as sniff:
        ...traffic...
    streams = sniff.streams          # {(src, sport, dst, dport): bytes}
"""

from __future__ import annotations

import os
import socket
import struct
import threading

ETH_P_IP = 0x0800
SOL_PACKET = 263
PACKET_STATISTICS = 6
RCVBUF = 16 << 20


def available() -> str:
    """Why a sniffer cannot run here ('' when it can)."""
    if os.geteuid() != 0:
        return "a packet socket needs root"
    if not hasattr(socket, "AF_PACKET"):
        return "no AF_PACKET on this system"
    return ""


class IncompleteCapture(AssertionError):
    """The kernel dropped packets before the sniffer read them."""


class Sniffer:
    def __init__(self, port: int, interface: str = "lo") -> None:
        self.port = port
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self.sock.bind((interface, ETH_P_IP))
        self.sock.settimeout(0.1)
        self._segments: dict[tuple[str, int, str, int], dict[int, bytes]] = {}
        self._stop = threading.Event()
        self.packets = 0
        self.streams: dict[tuple[str, int, str, int], bytes] = {}
        self._thread = threading.Thread(target=self._run, name="sniffer", daemon=True)
        self._thread.start()

    def __enter__(self) -> Sniffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _take(self, packet: bytes) -> None:
        if len(packet) < 20 or packet[0] >> 4 != 4 or packet[9] != socket.IPPROTO_TCP:
            return
        ihl = (packet[0] & 0x0F) * 4
        total = struct.unpack_from("!H", packet, 2)[0]
        if len(packet) < ihl + 20:
            return
        sport, dport, seq = struct.unpack_from("!HHI", packet, ihl)
        if self.port not in (sport, dport):
            return
        offset = (packet[ihl + 12] >> 4) * 4
        payload = packet[ihl + offset : total]
        self.packets += 1
        if payload:
            flow = (socket.inet_ntoa(packet[12:16]), sport, socket.inet_ntoa(packet[16:20]), dport)
            self._segments.setdefault(flow, {})[seq] = payload

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._take(self.sock.recv(65535))
            except TimeoutError:
                continue

    def stop(self) -> dict[tuple[str, int, str, int], bytes]:
        """Stop, read what the kernel still holds, and reassemble each direction."""
        if self._stop.is_set():
            return self.streams
        self._stop.set()
        self._thread.join(5)
        self.sock.setblocking(False)
        while True:
            try:
                self._take(self.sock.recv(65535))
            except BlockingIOError:
                break
        _, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        self.sock.close()
        if drops:
            raise IncompleteCapture(f"the kernel dropped {drops} packets before the sniffer read them")
        self.streams = {flow: b"".join(seg[s] for s in sorted(seg)) for flow, seg in self._segments.items()}
        return self.streams

    def seen(self, secret: bytes) -> list[tuple[str, int, str, int]]:
        """The directions of the connections whose bytes hold `secret` in clear."""
        return [flow for flow, data in self.streams.items() if secret in data]
