"""A keyed PROXY protocol v2 header: a forwarded client keeps its own address (issue 40, finding 4).

An entry member, the ``/ws/relay/`` bridge and a member's loopback forwarder open
one connection to the relay per client; without more, every client of a forwarder
is one source address at the relay, and one host's idle sockets fill the
per-address and pre-auth caps (`relay.server.limits`) for everyone behind it. So
the forwarder's first bytes on each connection it opens are a PROXY protocol
version 2 header (HAProxy's ``doc/proxy-protocol.txt``, section 2.2), naming the
client, with one TLV of a private type that makes it believable:

======  ====  ==========================================================
offset  size  field
======  ====  ==========================================================
0       12    signature ``\\r\\n\\r\\n\\x00\\r\\nQUIT\\n``
12      1     version 2, command PROXY: ``0x21``
13      1     ``0x11`` TCP over IPv4, ``0x21`` TCP over IPv6
14      2     length of what follows (big-endian)
16      12|36 source address, destination address, source port, destination port
..      3+50  TLV `MAC_TLV` (``0xE0``, spec 2.2.8's custom range): ``via`` as
              16 address bytes (IPv4 mapped into IPv6) and 2 port bytes, then
              HMAC-SHA256(key, `DOMAIN` + src + dst + via), each endpoint in
              that same 18-byte form
======  ====  ==========================================================

``via`` is the forwarder's own end of the connection that carries the header (the
address the receiver sees as its peer), so a header is believed only on the
socket it was made for: copied to another connection, it names the wrong
``via``. The key is the pool's (``POOL_KEY``, default ``RELAY_TOKEN``): only a
member can make one.

The receiver (`HeaderReader`) decides from a connection's first bytes:

- `NOT_A_HEADER`: the first bytes differ from the signature; they are the
  client's own. Nothing the relay speaks can start so: a v1 or legacy frame
  (`relay.wire.framing`, `relay.wire.legacy`) starts with its 4-byte big-endian
  length, and ``\\r\\n\\r\\n`` is 218 MB, over any ``RELAY_MAX_FRAME`` (64 MiB at most).
- `NEED_MORE`: a prefix of a header so far.
- `Verified`: the real source and destination, and how many bytes the header took.
- `HeaderRefused`: a signature followed by anything else. Causes: ``malformed``
  (version, command, family, lengths, TLVs), ``too_long`` (over `MAX_HEADER`),
  ``forged`` (no MAC TLV, or a MAC that does not verify), ``replayed`` (a good MAC
  for another ``via``).

Pure: no sockets, no clock; `feed()` never raises on any input.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import struct
from dataclasses import dataclass

SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
FIXED = 16  # signature, version and command, family, length
VERSION_PROXY = 0x21  # version 2 (high nibble), command PROXY (low nibble)
TCP_IPV4, TCP_IPV6 = 0x11, 0x21
ADDRESS_BYTES = {TCP_IPV4: 12, TCP_IPV6: 36}
MAC_TLV = 0xE0  # PP2_TYPE_MIN_CUSTOM: "application-specific data", never used by the protocol itself
ENDPOINT = 18  # 16 address bytes (IPv4 mapped into IPv6) + 2 port bytes
MAC_BYTES = 32
MAX_HEADER = 256  # a header longer than this is refused without reading it
DOMAIN = b"stkrelay proxy-v2 forwarded client 1\n"

Address = tuple[str, int]

# Why a header is refused (the receiver counts them by these names).
MALFORMED = "malformed"
TOO_LONG = "too_long"
FORGED = "forged"
REPLAYED = "replayed"
TRUNCATED = "truncated"  # the connection ended in the middle of a header (said by the transport)
CAUSES = (MALFORMED, TOO_LONG, FORGED, REPLAYED, TRUNCATED)


class _Mark:
    """A decision without data (`NOT_A_HEADER`, `NEED_MORE`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOT_A_HEADER = _Mark("NOT_A_HEADER")
NEED_MORE = _Mark("NEED_MORE")


@dataclass(frozen=True)
class Verified:
    """A header that verified: the client's address, the one it dialled, the header's size."""

    src: Address
    dst: Address
    size: int


@dataclass(frozen=True)
class HeaderRefused:
    """A header that did not verify, and why (one of `CAUSES`)."""

    cause: str
    detail: str = ""


Reading = _Mark | Verified | HeaderRefused


def _endpoint(address: Address) -> bytes:
    """`address` as 16 address bytes (IPv4 mapped into IPv6) and a big-endian port: ValueError if bad."""
    host, port = address
    ip = ipaddress.ip_address(host.split("%", 1)[0])  # a scope id is no part of the address
    if not isinstance(port, int) or not 0 <= port <= 0xFFFF:
        raise ValueError(f"port {port!r} is not 0..65535")
    packed = ip.packed if ip.version == 6 else b"\x00" * 10 + b"\xff\xff" + ip.packed
    return packed + struct.pack("!H", port)


def _address(raw: bytes) -> Address:
    """The inverse of `_endpoint`: an IPv4-mapped address reads as IPv4."""
    ip = ipaddress.IPv6Address(raw[:16])
    mapped = ip.ipv4_mapped
    return (str(mapped) if mapped is not None else str(ip), struct.unpack("!H", raw[16:18])[0])


def _mac(key: str, src: bytes, dst: bytes, via: bytes) -> bytes:
    return hmac.new(key.encode("utf-8", "surrogatepass"), DOMAIN + src + dst + via, hashlib.sha256).digest()


def canonical(address: Address) -> Address:
    """`address` as a receiver reads it back (``::ffff:a.b.c.d`` is ``a.b.c.d``): for comparisons."""
    return _address(_endpoint(address))


def encode(src: Address, dst: Address, via: Address, key: str) -> bytes:
    """The header for a client at `src` that dialled `dst`, forwarded on a connection whose own
    end is `via` (the receiver's view of its peer), made believable with `key` (the pool key).

    Raises ValueError on an address that is no IP address and port (the caller's bug)."""
    if not key:
        raise ValueError("the pool key must not be empty")
    s, d, v = _endpoint(src), _endpoint(dst), _endpoint(via)
    both_v4 = s[:12] == d[:12] == b"\x00" * 10 + b"\xff\xff"
    if both_v4:
        family, block = TCP_IPV4, s[12:16] + d[12:16] + s[16:] + d[16:]
    else:
        family, block = TCP_IPV6, s[:16] + d[:16] + s[16:] + d[16:]
    value = v + _mac(key, s, d, v)
    tlv = struct.pack("!BH", MAC_TLV, len(value)) + value
    body = block + tlv
    return SIGNATURE + struct.pack("!BBH", VERSION_PROXY, family, len(body)) + body


def _decode(data: bytes, key: str, peer: Address) -> Verified | HeaderRefused:
    """A whole header (`data` starts with one `FIXED` part and holds its whole length)."""
    ver_cmd, family, length = struct.unpack("!BBH", data[12:FIXED])
    if ver_cmd >> 4 != 2:
        return HeaderRefused(MALFORMED, f"version {ver_cmd >> 4}")
    if ver_cmd != VERSION_PROXY:
        return HeaderRefused(MALFORMED, f"command {ver_cmd & 0x0F} (only PROXY is sent)")
    size = ADDRESS_BYTES.get(family)
    if size is None:
        return HeaderRefused(MALFORMED, f"family and protocol 0x{family:02x} (TCP over IPv4 or IPv6 only)")
    if length < size:
        return HeaderRefused(MALFORMED, f"length {length} shorter than its addresses")
    block, tlvs = data[FIXED : FIXED + size], data[FIXED + size : FIXED + length]
    if family == TCP_IPV4:
        mapped = b"\x00" * 10 + b"\xff\xff"
        src, dst = mapped + block[0:4] + block[8:10], mapped + block[4:8] + block[10:12]
    else:
        src, dst = block[0:16] + block[32:34], block[16:32] + block[34:36]
    value: bytes | None = None
    while tlvs:
        if len(tlvs) < 3:
            return HeaderRefused(MALFORMED, "a TLV cut short")
        kind, n = struct.unpack("!BH", tlvs[:3])
        if len(tlvs) < 3 + n:
            return HeaderRefused(MALFORMED, "a TLV longer than the header")
        if kind == MAC_TLV:
            if value is not None:
                return HeaderRefused(MALFORMED, "two MAC TLVs")
            value = tlvs[3 : 3 + n]
        tlvs = tlvs[3 + n :]
    if value is None or len(value) != ENDPOINT + MAC_BYTES:
        return HeaderRefused(FORGED, "no MAC" if value is None else f"a MAC TLV of {len(value)} bytes")
    via, mac = value[:ENDPOINT], value[ENDPOINT:]
    if not hmac.compare_digest(mac, _mac(key, src, dst, via)):
        return HeaderRefused(FORGED, "the MAC does not verify with the pool key")
    try:
        here = _endpoint(peer)
    except Exception:  # the socket's own peer is no IP address (a tunnel's stream, a unix socket)
        here = b""
    if not hmac.compare_digest(via, here):
        return HeaderRefused(REPLAYED, f"made for a connection from {_format(_address(via))}")
    return Verified(_address(src), _address(dst), FIXED + length)


def _format(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def header_reading(data: bytes, key: str, peer: Address) -> Reading:
    """What the first bytes `data` of a connection from `peer` (the socket's view) are."""
    try:
        if not data:
            return NEED_MORE
        head = data[: len(SIGNATURE)]
        if head != SIGNATURE[: len(head)]:
            return NOT_A_HEADER
        if len(data) < FIXED:
            return NEED_MORE
        length = struct.unpack("!H", data[14:FIXED])[0]
        if FIXED + length > MAX_HEADER:
            return HeaderRefused(TOO_LONG, f"{FIXED + length} bytes, over {MAX_HEADER}")
        if len(data) < FIXED + length:
            return NEED_MORE
        if not key:
            return HeaderRefused(FORGED, "no pool key to verify it with")
        return _decode(data, key, peer)
    except Exception as exc:  # never: every branch above is checked; a bug here must not kill a peer
        return HeaderRefused(MALFORMED, f"unreadable: {type(exc).__name__}")


class HeaderReader:
    """The first bytes of one connection from `peer`, until they are decided.

    `feed()` returns `NEED_MORE` until a decision; then `rest` holds the client's
    own bytes (after a `Verified` header, or all of them for `NOT_A_HEADER`). At
    most `MAX_HEADER` bytes are ever held.
    """

    def __init__(self, key: str, peer: Address) -> None:
        self.key, self.peer = key, peer
        self.held = b""
        self.rest = b""
        self.reading: Reading = NEED_MORE

    @property
    def decided(self) -> bool:
        return self.reading is not NEED_MORE

    def feed(self, data: bytes) -> Reading:
        if self.decided:
            self.rest += data
            return self.reading
        self.held += data
        reading = header_reading(self.held[: MAX_HEADER + 1], self.key, self.peer)
        if reading is NEED_MORE:
            return reading
        self.reading = reading
        if reading is NOT_A_HEADER:
            self.rest = self.held
        elif isinstance(reading, Verified):
            self.rest = self.held[reading.size :]
        self.held = b""
        return reading
