"""The cloud's half of a tunnel's handshake (docs/design.md §14), sans-I/O. Pure.

Same frames as relay protocol v1.1 (`relay.wire.framing`): the cloud speaks first
with ``hello`` (its fresh nonce); the site's leader answers ``register`` with
``role: "tunnel"``, its ``kmsn``, ``station`` (its node), the ``epoch`` it
leads with, ``auth`` = HMAC(CLOUD_TOKEN, nonce|tunnel|kmsn|station), a
``cnonce`` (required: the cloud proves that it knows CLOUD_TOKEN too, with
``sauth`` in ``registered``) and ``lease``, its signed lease record. Then the
connection carries `relay.wire.mux` frames (raw mode).

What the cloud verifies, holding no pool key but each site's lease key
K_cloud (`relay.wire.lease_mac`; not the lease's ``sig``):

1. the tunnel knows this KMSN's ``CLOUD_TOKEN``, over a nonce the cloud just
   made (no replay of an old handshake);
2. the lease's ``cloud_sig`` verifies with the site's K_cloud over this same
   nonce: the lease comes from a holder of the pool key, for this connection
   (a forged epoch, or a lease sniffed off an earlier handshake, is refused);
3. the lease is a well-formed lease record (its fields and types, a 64-hex
   ``sig``) that names this KMSN, this node and this epoch, and is not a
   released one (``ttl_s: 0``);
4. the epoch is not below the highest the cloud has accepted for the KMSN
   (`relay.cloud.fence.EpochFence`), nor equal to it from another node.

So a holder of CLOUD_TOKEN without the pool key cannot fence the real leader
out with a made-up high epoch. Refusals (the error frame's code, then a close)
and their `TunnelAcceptor.cause`: ``bad_auth`` (cause ``unknown_kmsn`` for a
KMSN with no ``[site:<KMSN>]``, answered exactly as a bad token so that a stranger
cannot probe which sites this cloud serves; ``bad_token``; ``lease_unsigned``, ``lease_forged`` or
``lease_unverifiable`` for the MAC; ``bad_lease`` for a lease that does not
match), ``stale_epoch``, ``bad_request``/``bad_magic`` (shape).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from relay.wire.auth import is_nonce, new_nonce, new_session_id, server_proof, verify_auth
from relay.wire.events import MAGIC, NAME_RULE, TUNNEL_ROLE, error_frame, is_int, is_name
from relay.wire.framing import (
    BAD_AUTH,
    BAD_MAGIC,
    BAD_REQUEST,
    STALE_EPOCH,
    TIMEOUT,
    FramedConnection,
    Reject,
    State,
)
from relay.wire.lease_mac import mac_verdict

CLOUD_NODE = "cloud"
HANDSHAKE_FRAME = 64 << 10  # a tunnel's register, lease included, is far smaller
HEX = frozenset("0123456789abcdef")
LEASE_TYPES: dict[str, type | tuple[type, ...]] = {
    "kmsn": str,
    "node": str,
    "station": str,
    "ip": str,
    "port": int,
    "epoch": int,
    "renew_seq": int,
    "ttl_s": (int, float),
    "sig": str,
}

MAC_REFUSALS = {
    "unverifiable": "this cloud has no LEASE_KEY for the site: it cannot verify a lease",
    "unsigned": "the lease has no cloud_sig (the agent predates the lease MAC: upgrade it)",
    "forged": "the lease's cloud_sig does not verify with the site's LEASE_KEY over this nonce",
}

# kmsn, epoch, node -> ("accept" | "stale", why): the cloud's EpochFence.judge
Judge = Callable[[str, int, str], tuple[str, str]]


@dataclass(frozen=True, slots=True)
class TunnelRegistered:
    kmsn: str
    node: str
    epoch: int
    session: str
    lease: dict


def lease_problem(lease: object, kmsn: str, node: str, epoch: int) -> str | None:
    """Why `lease` cannot back a tunnel of (`kmsn`, `node`, `epoch`), or None (see 2. above)."""
    if not isinstance(lease, dict):
        return "lease must be the signed lease record (an object)"
    for name, kind in LEASE_TYPES.items():
        value = lease.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"lease field {name!r} is missing or not a {getattr(kind, '__name__', 'number')}"
    sig = lease["sig"]
    if len(sig) != 64 or not set(sig) <= HEX:
        return "lease sig is not 64 hex characters"
    if lease["kmsn"] != kmsn or lease["node"] != node or lease["epoch"] != epoch:
        return (
            f"lease names {str(lease['kmsn'])[:64]}/{str(lease['node'])[:64]} epoch {lease['epoch']}, "
            f"not {kmsn}/{node} epoch {epoch}"
        )
    if lease["ttl_s"] <= 0:
        return "lease is released (ttl_s 0): its holder no longer leads"
    return None


class TunnelAcceptor(FramedConnection):
    """The cloud's end of one tunnel connection until ``registered``; raw after.

    `tokens` maps each configured KMSN to its CLOUD_TOKEN, `lease_keys` to its
    K_cloud (a KMSN without one has no tunnel: ``lease_unverifiable``); `judge`
    is the fence. After a refusal, `refusal` is the code sent, `cause` the
    reason to count and `claim` what the tunnel claimed (kmsn, node, epoch).
    """

    def __init__(
        self,
        *,
        tokens: dict[str, str],
        lease_keys: dict[str, str],
        judge: Judge,
        nonce: str | None = None,
        session: str | None = None,
        max_frame: int = HANDSHAKE_FRAME,
    ) -> None:
        super().__init__(max_frame=max_frame, raw_mode=True, state=State.AWAIT_REGISTER)
        self.tokens, self.lease_keys, self.judge = tokens, lease_keys, judge
        self.nonce = new_nonce() if nonce is None else nonce
        self.session = new_session_id() if session is None else session
        self.registration: TunnelRegistered | None = None
        self.refusal: str | None = None  # the error code it was refused with
        self.cause: str | None = None  # why, finer than the code (see the module docstring)
        self.claim: tuple[str, str, int] | None = None  # the kmsn, node and epoch it claimed
        self._frame({"type": "hello", "magic": MAGIC, "epoch": 0, "node": CLOUD_NODE, "nonce": self.nonce})

    def fail(self, code: str, message: str) -> None:
        if self.state is State.CLOSED:
            return
        if self._can_frame():
            self._frame(error_frame(code, message))
        self.state = State.CLOSED

    def timeout(self) -> None:
        if self.state is State.AWAIT_REGISTER:
            self.refusal = self.cause = TIMEOUT
            self.fail(TIMEOUT, "no register within the deadline")

    def _reject(self, exc: Reject, id: object = None) -> None:
        super()._reject(exc)
        self.refusal = exc.code
        self.cause = self.cause or exc.code
        self.fail(exc.code, exc.message)

    def _handle(self, obj: dict) -> None:
        if self.state is not State.AWAIT_REGISTER:  # raw mode takes every byte once open
            raise Reject(BAD_REQUEST, "unexpected frame")
        if obj.get("type") != "register":
            raise Reject(BAD_REQUEST, "expected a register frame")
        if obj.get("magic") != MAGIC:
            raise Reject(BAD_MAGIC, f"magic must be {MAGIC}")
        kmsn, node, epoch = obj.get("kmsn"), obj.get("station"), obj.get("epoch")
        auth, cnonce = obj.get("auth"), obj.get("cnonce")
        if obj.get("role") != TUNNEL_ROLE:
            raise Reject(BAD_REQUEST, "this port takes tunnels only (role tunnel)")
        if not (is_name(kmsn) and is_name(node)):
            raise Reject(BAD_REQUEST, f"kmsn and station must be {NAME_RULE}")
        if not (is_int(epoch) and epoch >= 0):
            raise Reject(BAD_REQUEST, "a tunnel names the epoch it leads with")
        if not isinstance(auth, str) or not is_nonce(cnonce):
            raise Reject(BAD_REQUEST, "a tunnel sends auth and a cnonce (32 hex)")
        token = self.tokens.get(kmsn)
        # An unknown KMSN is answered as a bad token, after the same HMAC (over a
        # throw-away key): a stranger must not learn which KMSNs this cloud serves.
        authentic = verify_auth(token or self.nonce, self.nonce, TUNNEL_ROLE, kmsn, node, auth)
        if token is None or not authentic:
            self.cause = "unknown_kmsn" if token is None else "bad_token"
            raise Reject(BAD_AUTH, "authentication failed")
        self.claim = (kmsn, node, epoch)
        lease = obj.get("lease")
        if not isinstance(lease, dict):
            self.cause = "bad_lease"
            raise Reject(BAD_AUTH, "lease must be the signed lease record (an object)")
        mac = mac_verdict(lease, self.lease_keys.get(kmsn), self.nonce)
        if mac is not None:
            self.cause = f"lease_{mac}"
            raise Reject(BAD_AUTH, MAC_REFUSALS[mac])
        problem = lease_problem(lease, kmsn, node, epoch)
        if problem is not None:
            self.cause = "bad_lease"
            raise Reject(BAD_AUTH, problem)
        verdict, why = self.judge(kmsn, epoch, node)
        if verdict != "accept":
            raise Reject(STALE_EPOCH, why)
        sauth = server_proof(token, cnonce, self.session, epoch)
        self._frame({"type": "registered", "epoch": epoch, "session": self.session, "sauth": sauth})
        self.state = State.OPEN
        self.registration = TunnelRegistered(kmsn, node, epoch, self.session, obj["lease"])
        self._events.append(self.registration)
