"""Where is the leader's relay? The discovery chain of a relay client (docs/design.md §9).

Three sources (four with beacons), asked in this order by `Discovery.find()`;
the first that knows wins:

1. `LeaseFile`: the pool's signed lease (``relay_leader.json`` in the lease
   dir, §5.1). Only a valid, unreleased record of our KMSN counts; a forged,
   corrupt, missing or released one is no evidence (a forged one is logged as
   the security event it is). Read in a daemon thread with a deadline: a dead
   file share must not hang the client.
   Then, when given (`beacons`), `relay.client.beacon_discovery.BeaconListener`:
   the leader's beacons on the LAN (docs/design.md §13), a hint the handshake confirms.
2. `AgentApi`: any agent's ``GET /api/v1/leader?kmsn=...`` (`elections.web.health`).
   All the configured agents are asked at once with a short timeout; among the
   valid answers for our KMSN the highest epoch wins (an agent may lag behind).
   These answers are not signed: they only say where to connect; the relay
   itself still authenticates the session, and its epoch fences it.
   Agents serve HTTPS (`https://` URLs): with `pins` (SHA-256 fingerprints, as
   `relayctl tls` prints them) only a pinned certificate is spoken to; with
   `ca_file` the usual chain and name checks (the operator's TLS_CERT); else the
   system's CAs (`stkhost.pinned_https`). The API token is never sent to a
   plain `http://` URL off loopback: such an agent is asked without it.
3. `Fallbacks`: configured ``(host, port)`` pairs, epoch unknown; one per call,
   in rotation, so that a client retrying walks through all of them.

Each source's `find()` returns a `Leader` or None and never raises: an
unreachable source is "no answer", and the reason is kept in `last` for logs
and error messages.

`find(avoid)` skips the addresses in `avoid` (servers that failed to prove
they know the key: `relay.client.follow`), so that a rogue answer cannot
keep a client away from the next candidate, except in the lease: a valid
signed lease is the pool's own word and always wins.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, TypeVar

from elections.core.evidence import DETAIL_CHARS, printable
from elections.core.lease import LeaseRead, LeaseRecord
from elections.core.untrusted import LEADER_ANSWER, Untrusted, load_object
from elections.errors import StoreUnavailable
from stkhost.pinned_https import opener

log = logging.getLogger("stkrelay.client")

T = TypeVar("T")
Address = tuple[str, int]

LEASE_READ_TIMEOUT = 2.0
HTTP_TIMEOUT = 1.0


@dataclass(frozen=True)
class Leader:
    """A relay to connect to: its address, its epoch when known, and who said so."""

    ip: str
    port: int
    epoch: int | None = None
    node: str | None = None
    source: str = ""

    @property
    def address(self) -> tuple[str, int]:
        return (self.ip, self.port)

    def describe(self) -> str:
        who = f"{self.node} at " if self.node else ""
        epoch = "?" if self.epoch is None else self.epoch
        return f"{who}{self.ip}:{self.port} epoch {epoch} (from {self.source or 'unknown'})"


class LeaderSource(Protocol):
    name: str
    last: str  # what the last find() saw, for logs and error messages

    async def find(self, avoid: Collection[Address] = ()) -> Leader | None: ...


async def run_blocking(fn: Callable[[], T], timeout: float, name: str = "relay-client-io") -> T:
    """Run `fn` in a daemon thread; wait at most `timeout` (TimeoutError).

    Not the loop's default executor: `asyncio.run()` joins that one on exit, so
    a read hung on a dead share would hang the process's exit too.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def work() -> None:
        try:
            result: Any = fn()
            ok = True
        except BaseException as exc:
            result, ok = exc, False
        try:
            loop.call_soon_threadsafe(settle, ok, result)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=work, name=name, daemon=True).start()
    async with asyncio.timeout(timeout):
        return await future


class LeaseReader(Protocol):
    """What `LeaseFile` reads: the pool's lease store, opened by the wiring (`relay.lease_file`:
    the client library opens no store of its own)."""

    def read(self) -> LeaseRead: ...


class LeaseFile:
    """The signed lease in `lease_dir`, read through `store`. `read_record()` is also what the
    client polls."""

    name = "lease"

    def __init__(
        self, store: LeaseReader, lease_dir: str, kmsn: str | None = None, timeout: float = LEASE_READ_TIMEOUT
    ) -> None:
        self.store, self.lease_dir, self.kmsn, self.timeout = store, lease_dir, kmsn, timeout
        self.last = "not read yet"
        self._reported = ""  # revision of the last bad file logged, to log each once

    def _read(self) -> LeaseRecord | None:
        try:
            read = self.store.read()
        except StoreUnavailable as exc:
            self.last = f"lease store unreachable: {exc}"
            return None
        record = read.record
        if read.status != "valid" or record is None:
            quoted = printable(read.detail, DETAIL_CHARS)  # it may quote the file's own text
            self.last = f"lease {read.status}: {quoted}"
            if read.status == "forged":
                self.last += " (a wrong relay token, or a forged file)"
            if read.status in ("forged", "corrupt") and read.revision != self._reported:
                self._reported = read.revision
                level = logging.WARNING if read.status == "forged" else logging.INFO
                log.log(level, "ignoring the lease in %s: %s", self.lease_dir, quoted)
            return None
        if self.kmsn is not None and record.kmsn != self.kmsn:
            self.last = f"lease is for KMSN {record.kmsn}, not {self.kmsn}"
            return None
        if record.released:
            self.last = f"lease released by {record.node} (epoch {record.epoch}): no leader"
            return None
        self.last = f"lease names {record.describe()}"
        return record

    async def read_record(self) -> LeaseRecord | None:
        """The valid, unreleased lease record of our KMSN, or None (no evidence)."""
        try:
            return await run_blocking(self._read, self.timeout, name="relay-client-lease")
        except TimeoutError:
            self.last = f"lease read took over {self.timeout:g} s"
            return None

    async def find(self, avoid: Collection[Address] = ()) -> Leader | None:
        record = await self.read_record()  # never avoided: the signed lease always wins
        if record is None:
            return None
        return Leader(record.ip, record.port, record.epoch, record.node, self.name)


def parse_leader_answer(doc: object, kmsn: str, source: str) -> Leader | str:
    """An agent's ``/api/v1/leader`` JSON as a `Leader`, or why it is no answer."""
    if not isinstance(doc, dict):
        return "answer is not a JSON object"
    if doc.get("status") != "valid":
        return f"no valid lease there (status {doc.get('status')!r})"
    if doc.get("kmsn") != kmsn:
        return f"answer is for KMSN {doc.get('kmsn')!r}"
    ip, port, epoch, node = doc.get("ip"), doc.get("port"), doc.get("epoch"), doc.get("leader")
    if not (isinstance(ip, str) and ip and _is_int(port) and 0 < port < 65536 and _is_int(epoch)):
        return "answer lacks ip, port or epoch"
    return Leader(ip, port, epoch, node if isinstance(node, str) else None, source)


def in_clear_on_lan(url: str) -> bool:
    """A plain http:// URL whose host is not a loopback address (a name counts as the LAN)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http":
        return False
    try:
        return not ipaddress.ip_address(parts.hostname or "").is_loopback
    except ValueError:
        return parts.hostname != "localhost"


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class AgentApi:
    """Ask agents' web ports where the leader is; the highest epoch among answers wins."""

    name = "agents"

    def __init__(
        self, urls: Iterable[str], kmsn: str, timeout: float = HTTP_TIMEOUT, api_token: str | None = None,
        pins: Iterable[str] = (), ca_file: str | None = None,
    ) -> None:  # fmt: skip
        self.urls = [u.rstrip("/") for u in urls]
        self.kmsn, self.timeout = kmsn, timeout
        # Agents answer the lookup without login only when STK_PUBLIC_LEADER_LOOKUP=1;
        # otherwise a panel API token (manage.py stkuser token NAME) is needed.
        self.headers = {"Authorization": f"Bearer {api_token}"} if api_token else {}
        # Never through an http_proxy from the environment (agents are on the LAN).
        self.opener = opener(pins, ca_file)
        self.last = "not asked yet" if self.urls else "no agent URLs configured"

    def _ask(self, base: str) -> Leader | str:
        url = f"{base}/api/v1/leader?{urllib.parse.urlencode({'kmsn': self.kmsn})}"
        headers = self.headers if not in_clear_on_lan(url) else {}
        try:
            with self.opener.open(urllib.request.Request(url, headers=headers), timeout=self.timeout) as resp:
                body = resp.read(64 << 10)
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403) and self.headers and not headers:
                return f"HTTP {exc.code} (the API token is not sent in plain HTTP: use https://)"
            return f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            return f"unreachable ({getattr(exc, 'reason', None) or exc})"
        try:
            doc = load_object(body, LEADER_ANSWER, "answer")
        except Untrusted as exc:
            return f"answer refused ({exc.cause})"
        return parse_leader_answer(doc, self.kmsn, f"agent {base}")

    async def find(self, avoid: Collection[Address] = ()) -> Leader | None:
        if not self.urls:
            return None

        async def ask(base: str) -> Leader | str:
            try:
                return await run_blocking(lambda: self._ask(base), self.timeout + 0.5, "relay-client-http")
            except TimeoutError:
                return "timed out"

        answers = await asyncio.gather(*(ask(base) for base in self.urls))
        answers = [
            f"{a.describe()}: skipped, it did not prove itself"
            if isinstance(a, Leader) and a.address in avoid
            else a
            for a in answers
        ]
        found = [a for a in answers if isinstance(a, Leader)]
        self.last = "; ".join(
            f"{base}: {a.describe() if isinstance(a, Leader) else a}"
            for base, a in zip(self.urls, answers, strict=True)
        )
        if not found:
            return None
        return max(found, key=lambda leader: leader.epoch or 0)  # max keeps the first of equals


class Fallbacks:
    """Configured relay addresses, epoch unknown: one per `find()`, in rotation."""

    name = "fallback"

    def __init__(self, pairs: Iterable[tuple[str, int]]) -> None:
        self.pairs = list(pairs)
        self.last = "no fallbacks configured" if not self.pairs else "not used yet"
        self._next = 0

    async def find(self, avoid: Collection[Address] = ()) -> Leader | None:
        if not self.pairs:
            return None
        for _ in self.pairs:
            host, port = self.pairs[self._next % len(self.pairs)]
            self._next += 1
            if (host, port) not in avoid:
                self.last = f"fallback {host}:{port}"
                return Leader(host, port, None, None, self.name)
        self.last = "every fallback failed to prove itself lately"
        return None


class Discovery:
    """The chain: ask each source in order; the first `Leader` found wins."""

    def __init__(self, sources: Sequence[LeaderSource]) -> None:
        self.sources = list(sources)

    @classmethod
    def build(
        cls,
        *,
        kmsn: str,
        lease: LeaseFile | None = None,
        agents: Iterable[str] = (),
        fallbacks: Iterable[tuple[str, int]] = (),
        http_timeout: float = HTTP_TIMEOUT,
        api_token: str | None = None,
        beacons: LeaderSource | None = None,
        agent_pins: Iterable[str] = (),
        agent_ca: str | None = None,
    ) -> Discovery:
        """The lease file (`lease`, from `relay.lease_file.lease_file`, when given), then the
        leader's beacons (a `relay.client.beacon_discovery.BeaconListener`, when given), then
        agents' HTTP API, then fallbacks."""
        sources: list[LeaderSource] = []
        if lease is not None:
            sources.append(lease)
        if beacons is not None:
            sources.append(beacons)
        agents = list(agents)
        if agents:
            sources.append(AgentApi(agents, kmsn, http_timeout, api_token, agent_pins, agent_ca))
        fallbacks = list(fallbacks)
        if fallbacks:
            sources.append(Fallbacks(fallbacks))
        return cls(sources)

    @property
    def lease(self) -> LeaseFile | None:
        """The lease source, which a client also polls for changes of leader."""
        return next((s for s in self.sources if isinstance(s, LeaseFile)), None)

    async def find(self, avoid: Collection[Address] = ()) -> Leader | None:
        for source in self.sources:
            leader = await source.find(avoid)
            if leader is not None:
                return leader
        return None

    def describe(self) -> str:
        """What each source said last time, for a "cannot reach a leader" message."""
        if not self.sources:
            return "no discovery source configured"
        return "; ".join(f"{s.name}: {s.last}" for s in self.sources)
