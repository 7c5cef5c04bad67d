"""One pool's way to etcd: several members, a deadline on every call, failover,
TLS, and bounded answers (docs/design.md §5.2).

Built on `etcd3gw` (the v3 HTTP/JSON gateway) rather than `aetcd` (asyncio and
gRPC): the `LeaseStore` port is synchronous and is called from the Celery
worker's thread, the supervisor and Django views; a blocking HTTP client with
`requests` timeouts fits it without an event loop per call, and it brings no
compiled gRPC/protobuf stack. The gateway path is fixed to `/v3/` (etcd ≥ 3.4):
etcd3gw would otherwise discover it with an extra `GET /version` per client,
a request that hangs like any other when a member is paused.

- `call(path, body)` posts to the preferred member; on a connection error, a
  timeout, or an answer that says the member cannot serve now (no leader,
  request timed out, HTTP 5xx), it tries the next member, all within one
  deadline (`SHARE_TIMEOUT`). The member that answered becomes the preferred
  one. When the deadline passes: `StoreUnavailable`. Every write we make is a
  compare-and-set, so retrying a write whose first answer was lost is safe.
- Answers are read with a byte cap (`TooLarge` past it): anyone who can write
  the prefix must not make an agent read a gigabyte.
- `LeaseNotFound` is etcd's "requested lease not found": the etcd lease under a
  record was revoked or expired.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from elections.errors import StoreUnavailable

API_PATH = "/v3/"
SMALL = 256 << 10  # bytes of an answer to anything but a range read
RETRYABLE_CODES = {4, 14}  # gRPC DeadlineExceeded, Unavailable (no leader, stopping, timed out)
ROUND_PAUSE = 0.05  # seconds between two rounds over the members that all failed
MIN_ATTEMPT = 0.25  # seconds at least for one attempt while other members remain


class TooLarge(Exception):
    """An answer longer than the cap allowed for it."""


class LeaseNotFound(Exception):
    """etcd answered "requested lease not found"."""


class EtcdRefused(Exception):
    """etcd answered, and said no (a bad request, a compacted revision...)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def unb64(text: Any) -> bytes:
    return base64.b64decode(text) if isinstance(text, str) else b""


def prefix_end(prefix: str) -> str:
    """The range end that covers every key starting with `prefix`."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return raw.decode()


def gateway_int(value: Any) -> int:
    """A number of the gateway's JSON (int64 arrive as strings; zeros are left out)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class Tls:
    ca: str = ""
    cert: str = ""
    key: str = ""


class EtcdClient:
    def __init__(self, endpoints: list[str], timeout: float, tls: Tls | None = None) -> None:
        import etcd3gw  # only pools on etcd import it

        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.tls = tls or Tls()
        self._members = []
        for url in self.endpoints:
            parts = urlsplit(url)
            client = etcd3gw.client(
                host=parts.hostname or "", port=parts.port or 2379, protocol=parts.scheme,
                ca_cert=self.tls.ca or None, cert_cert=self.tls.cert or None, cert_key=self.tls.key or None,
                api_path=API_PATH,
            )  # fmt: skip
            self._members.append(client)
        self._preferred = 0
        self._lock = threading.Lock()
        self.revision = 0  # the highest cluster revision any answer carried
        self.last_member = ""  # the endpoint that answered last
        self.failovers = 0  # times a call moved on to another member
        self.answered: tuple[float, float, str] = (0.0, 0.0, "")  # the last answer: sent, received, its Date

    def url_of(self, i: int, path: str) -> str:
        return self._members[i].get_url(path)

    def session(self, i: int) -> Any:
        return self._members[i].session

    def call(
        self, path: str, body: dict[str, Any], cap: int = SMALL, timeout: float | None = None
    ) -> dict[str, Any]:
        """POST `body` to `path` on the first member that can answer, within the deadline."""
        budget = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        n = len(self._members)
        with self._lock:
            first = self._preferred
        errors: list[str] = []
        k = 0  # attempts so far: round after round over the members until the deadline, since
        # a member's quick "leader changed" (an etcd election under way) is worth asking again
        while True:
            i = (first + k) % n
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if k and k % n == 0:  # a whole round failed: let an election settle a moment
                time.sleep(min(ROUND_PAUSE, left))
                left = deadline - time.monotonic()
                if left <= 0:
                    break
            in_round = n - k % n
            per = left if in_round == 1 else max(left / in_round, min(MIN_ATTEMPT, left))
            k += 1
            try:
                doc = self._post(i, path, body, cap, per)
            except (ConnectionError, TimeoutError, _Retry) as exc:
                errors.append(f"{self.endpoints[i]}: {exc}")
                self.failovers += 1
                continue
            with self._lock:
                self._preferred = i
            self.last_member = self.endpoints[i]
            rev = gateway_int((doc.get("header") or {}).get("revision"))
            if rev > self.revision:
                self.revision = rev
            return doc
        with self._lock:
            self._preferred = (first + 1) % n  # start elsewhere next time
        why = "; ".join(errors[-3:]) or "no time left"
        raise StoreUnavailable(f"etcd did not answer within {budget:g} s ({why})")

    def _post(self, i: int, path: str, body: dict[str, Any], cap: int, timeout: float) -> dict[str, Any]:
        import requests

        sent = time.time()
        try:
            resp = self._members[i].session.post(
                self.url_of(i, path), data=json.dumps(body), timeout=(min(timeout, 1.0), timeout), stream=True
            )
        except requests.exceptions.Timeout as exc:
            raise TimeoutError(str(exc) or "timed out") from None
        except requests.exceptions.RequestException as exc:
            raise ConnectionError(type(exc).__name__) from None
        try:
            raw = _read_capped(resp, cap, time.monotonic() + timeout)
        except requests.exceptions.RequestException as exc:
            raise ConnectionError(type(exc).__name__) from None
        finally:
            resp.close()
        # The member's wall clock, as its HTTP Date says (1 s grain): `core.skew`, shown only.
        self.answered = (sent, time.time(), str(resp.headers.get("Date") or "")[:64])
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            raise _Retry(f"HTTP {resp.status_code}: not JSON") from None
        if not isinstance(doc, dict):
            raise _Retry(f"HTTP {resp.status_code}: not a JSON object")
        if resp.status_code == 200:
            return doc
        code, message = gateway_int(doc.get("code")), str(doc.get("message") or doc.get("error") or "")[:200]
        if "lease not found" in message:
            raise LeaseNotFound(message)
        if resp.status_code >= 500 or code in RETRYABLE_CODES:
            raise _Retry(f"HTTP {resp.status_code}: {message}")
        raise EtcdRefused(code, message)

    # -- the calls the store makes -------------------------------------------------
    def range(self, key: str, end: str | None = None, cap: int = SMALL, **opts: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"key": b64(key), **opts}
        if end is not None:
            body["range_end"] = b64(end)
        return self.call("kv/range", body, cap=cap)

    def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]],
            failure: list[dict[str, Any]] | None = None, cap: int = SMALL) -> dict[str, Any]:  # fmt: skip
        return self.call(
            "kv/txn", {"compare": compare, "success": success, "failure": failure or []}, cap=cap
        )

    def grant(self, ttl: int) -> tuple[int, int]:
        """A new etcd lease: (id, the TTL etcd granted, which may be raised to its minimum)."""
        doc = self.call("lease/grant", {"TTL": ttl, "ID": 0})
        return gateway_int(doc.get("ID")), gateway_int(doc.get("TTL"))

    def keepalive(self, lease: int) -> int:
        """Refresh `lease`; its TTL now, or ≤ 0 if etcd no longer has it."""
        doc = self.call("lease/keepalive", {"ID": lease})
        result = doc.get("result")
        result = result if isinstance(result, dict) else doc
        return gateway_int(result.get("TTL")) if "TTL" in result else -1

    def time_to_live(self, lease: int) -> tuple[int, int]:
        """(seconds left, TTL granted) of `lease`, as etcd counts them (-1: no such lease)."""
        doc = self.call("kv/lease/timetolive", {"ID": lease})
        return gateway_int(doc.get("TTL")) if "TTL" in doc else -1, gateway_int(doc.get("grantedTTL"))

    def revoke(self, lease: int) -> None:
        try:
            self.call("kv/lease/revoke", {"ID": lease})
        except LeaseNotFound:
            pass

    def status(self, i: int, timeout: float) -> dict[str, Any]:
        """One member's own status (its leader, raft term, revision), no failover."""
        return self._post(i, "maintenance/status", {}, SMALL, timeout)

    def member_list(self) -> list[dict[str, Any]]:
        doc = self.call("cluster/member/list", {})
        members = doc.get("members")
        return [m for m in members if isinstance(m, dict)] if isinstance(members, list) else []


class _Retry(Exception):
    """This member cannot serve now: try the next one."""


def _read_capped(resp: Any, cap: int, deadline: float) -> bytes:
    parts, size = [], 0
    for chunk in resp.iter_content(chunk_size=65536):
        parts.append(chunk)
        size += len(chunk)
        if size > cap:
            raise TooLarge(f"etcd answered more than {cap} bytes")
        if time.monotonic() > deadline:
            raise TimeoutError("answer not complete before the deadline")
    return b"".join(parts)


def put(key: str, value: bytes, lease: int = 0) -> dict[str, Any]:
    op: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        op["lease"] = lease
    return {"request_put": op}


def delete(key: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def mod_is(key: str, revision: int) -> dict[str, Any]:
    """Compare: the key's mod_revision is `revision` (0: the key does not exist)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": revision}


def created_at(key: str, revision: int) -> dict[str, Any]:
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": revision}


def get(key: str) -> dict[str, Any]:
    return {"request_range": {"key": b64(key)}}
