"""What the cloud reads of a remote client's stream (docs/design.md §14). Pure.

The cloud holds no site key, so it cannot register anyone: it greets a remote
client with ``hello`` (its own nonce), reads the first frame only far enough
to know which KMSN it is for, and forwards that ``register`` byte for byte,
with the nonce, through the KMSN's tunnel; the site's leader verifies it (a
`relay.wire.server_connection.ServerConnection` built with this nonce) and answers. Then the
cloud pipes bytes both ways.

- `Greeting`: the hello, then the bytes up to and including the first frame
  (at most `GREETING_LIMIT`): `kmsn` once it is in, or a refusal (code,
  message) for a first frame that is not a ``register`` naming a string KMSN.
- `FrameCursor`: follows frame boundaries of the site-to-client direction of
  a JSON stream without buffering payloads, so that the cloud inserts its own
  ``leader_changed`` only between two frames (`at_boundary`), and learns from
  the site's first frame (``registered`` or ``error``) whether the client got in.
"""

from __future__ import annotations

from relay.wire.auth import new_nonce
from relay.wire.events import MAGIC, NAME_RULE, is_name
from relay.wire.framing import (
    BAD_REQUEST,
    FRAME_TOO_LARGE,
    HEADER_SIZE,
    FrameDecoder,
    ProtocolError,
    encode_frame,
    read_header,
)

GREETING_LIMIT = 64 << 10
CLOUD_NODE = "cloud"


class Greeting:
    """The cloud's side of a remote client's connection until the first frame."""

    def __init__(self, nonce: str | None = None, limit: int = GREETING_LIMIT) -> None:
        self.nonce = new_nonce() if nonce is None else nonce
        self.hello = encode_frame({"type": "hello", "magic": MAGIC, "epoch": 0, "node": CLOUD_NODE,
                                   "nonce": self.nonce})  # fmt: skip
        self.buffer = bytearray()  # every byte received so far, to forward verbatim
        self.kmsn: str | None = None
        self.role: str = ""
        self.station: str = ""
        self.refusal: tuple[str, str] | None = None
        self.register: dict = {}  # the first frame once it is a register (for `relay.cloud.grants`)
        self._decoder = FrameDecoder(limit)
        self._limit = limit

    @property
    def done(self) -> bool:
        return self.kmsn is not None or self.refusal is not None

    def receive_data(self, data: bytes) -> None:
        """Feed the client's bytes; never raises."""
        if self.done:
            self.buffer += data
            return
        if len(self.buffer) + len(data) > 2 * self._limit:
            self.refusal = (FRAME_TOO_LARGE, f"handshake larger than {self._limit} bytes")
            return
        self.buffer += data
        self._decoder.feed(data, max_frames=1)
        for item in self._decoder.events():
            if isinstance(item, ProtocolError):
                self.refusal = (item.code, item.message)
            else:
                self._first(item)

    def _first(self, obj: dict) -> None:
        kmsn, role, station = obj.get("kmsn"), obj.get("role"), obj.get("station")
        if obj.get("type") != "register" or not is_name(kmsn):
            self.refusal = (BAD_REQUEST, "expected a register frame naming a kmsn")
            return
        if not is_name(station):  # the site would refuse it too: it need not cross the tunnel
            self.refusal = (BAD_REQUEST, f"kmsn and station must be {NAME_RULE}")
            return
        self.kmsn = kmsn
        self.register = obj
        self.role = role[:32] if isinstance(role, str) else ""
        self.station = station[:64] if isinstance(station, str) else ""


class FrameCursor:
    """Frame boundaries of a byte stream of relay frames, payloads not kept
    except the first (at most `first_limit` bytes), which says whether the
    client registered."""

    def __init__(self, first_limit: int = GREETING_LIMIT) -> None:
        self.header = bytearray()
        self.remaining = 0  # payload bytes of the current frame still to come
        self.first: bytes | None = None
        self.broken = False  # a header that is no frame: stop following
        self._first_buf = bytearray()
        self._first_limit = first_limit
        self._frames = 0

    @property
    def at_boundary(self) -> bool:
        return not self.broken and self.remaining == 0 and not self.header

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self.broken:
            if self.remaining == 0:
                take = min(HEADER_SIZE - len(self.header), len(view))
                self.header += view[:take]
                view = view[take:]
                if len(self.header) < HEADER_SIZE:
                    return
                length = read_header(self.header, 1 << 32)
                self.header.clear()
                if isinstance(length, ProtocolError):
                    self.broken = True
                    return
                self.remaining = length
                continue
            take = min(self.remaining, len(view))
            if self._frames == 0 and len(self._first_buf) < self._first_limit:
                self._first_buf += view[:take]
            self.remaining -= take
            view = view[take:]
            if self.remaining == 0:
                if self._frames == 0:
                    self.first = bytes(self._first_buf)
                self._frames += 1
