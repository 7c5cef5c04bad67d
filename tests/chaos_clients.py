"""The chaos run's clients, and the history they write (judged by tests/chaos_checker.py).

- `History`: a thread-safe JSON-lines writer; every record's ``time`` is on
  the runner's monotonic clock (seconds since the history began).
- `Prober`: one thread per agent that registers at that agent's relay over
  and over (a fresh connection each time, protocol 1.1: the relay must prove
  it knows the key) and records each attempt: ``ok`` with the epoch the relay
  gave and the node its hello named, or ``fail`` with why.
- `Stream`: two `relay.client.relay_client.RelayClient`s on one asyncio loop, a commander
  ``C01`` that sends sequenced messages to an agent-role client ``P01``,
  through whichever relay leads. A send is invoked when handed to `send()`,
  ``ok`` when the relay confirms it (`on_confirmed`), ``fail`` when a
  ``no_route`` is surfaced; each receipt at P01 is a ``recv``; each
  registration of either client an ``info`` with its node and epoch.

Everything runs on threads that may first enter a network namespace (`enter`),
so that the clients stand on the site's LAN.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROBE_TIMEOUT = 1.5


class History:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.t0 = time.monotonic()
        self._fh = open(path, "w")  # noqa: SIM115  (closed by close())
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def record(self, type: str, f: str, **kw: Any) -> float:
        with self._lock:
            t = self.now()
            self._fh.write(json.dumps({"type": type, "f": f, "time": round(t, 6), **kw}) + "\n")
            return t

    def close(self) -> None:
        with self._lock:
            self._fh.close()

    def flush(self) -> None:
        with self._lock:
            self._fh.flush()


def probe_once(ip: str, port: int, kmsn: str, token: str, station: str) -> tuple[str, int | None, str | None]:
    """Register once at ip:port: ("ok", epoch, node) or ("fail", None, why)."""
    from relay.wire.auth import new_nonce
    from relay.wire.client_connection import ClientConnection
    from relay.wire.events import ErrorReceived, Hello, Registered

    deadline = time.monotonic() + PROBE_TIMEOUT
    try:
        sock = socket.create_connection((ip, port), timeout=0.5)
    except OSError as exc:
        return "fail", None, f"connect: {exc.__class__.__name__}"
    conn = ClientConnection(role="agent", kmsn=kmsn, station=station, token=token, cnonce=new_nonce())
    node = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "fail", None, "timeout"
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                conn.receive_eof()
            else:
                conn.receive_data(data)
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
            for event in conn.events_received():
                if isinstance(event, Hello):
                    node = event.node
                elif isinstance(event, Registered):
                    return "ok", event.epoch, node
                elif isinstance(event, ErrorReceived):
                    return "fail", None, event.code
                elif hasattr(event, "code"):
                    return "fail", None, str(event.code)
            if not data or conn.closed:
                return "fail", None, "closed"
    except OSError as exc:
        return "fail", None, exc.__class__.__name__
    finally:
        sock.close()


class Prober(threading.Thread):
    """Registers at one agent every `every` seconds until stopped; records each attempt."""

    def __init__(self, history: History, agent: str, ip: str, port: int, kmsn: str, token: str,
                 enter: Callable[[], None] | None = None, every: float = 0.2) -> None:  # fmt: skip
        super().__init__(name=f"probe-{agent}", daemon=True)
        self.history, self.agent, self.ip, self.port = history, agent, ip, port
        self.kmsn, self.token, self.enter_ns, self.every = kmsn, token, enter, every
        self.stopping = threading.Event()
        self.last_ok_invoked = -1.0  # history time of the latest accepted registration's invoke

    def run(self) -> None:
        if self.enter_ns:
            self.enter_ns()
        proc = f"probe-{self.agent}"
        n = 0
        while not self.stopping.is_set():
            n += 1
            invoked = self.history.record("invoke", "probe", proc=proc, agent=self.agent)
            result, epoch, detail = probe_once(self.ip, self.port, self.kmsn, self.token, f"X{n % 1000:03d}")
            if result == "ok":
                self.history.record("ok", "probe", proc=proc, agent=self.agent, epoch=epoch, node=detail)
                self.last_ok_invoked = invoked
            else:
                self.history.record("fail", "probe", proc=proc, agent=self.agent, error=detail)
            self.stopping.wait(self.every)

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)


class Stream(threading.Thread):
    """C01 -> P01 sequenced messages through the leading relay, on one asyncio loop."""

    def __init__(
        self, history: History, kmsn: str, token: str, lease_dir: Path, relays: list[tuple[str, int]],
        enter: Callable[[], None] | None = None, every: float = 0.05,
    ) -> None:  # fmt: skip
        super().__init__(name="stream", daemon=True)
        self.history, self.kmsn, self.token = history, kmsn, token
        self.lease_dir, self.relays, self.enter_ns, self.every = lease_dir, relays, enter, every
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = threading.Event()
        self.sending = threading.Event()
        self.sending.set()
        self.confirmed: set[str] = set()
        self.received: set[str] = set()
        self.sent = 0
        self.error: BaseException | None = None
        self._stopping: asyncio.Event | None = None
        self.producer: Any = None

    def run(self) -> None:
        if self.enter_ns:
            self.enter_ns()
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by the runner
            self.error = exc
            self.started.set()

    def _client(self, role: str, station: str, **kw: Any) -> Any:
        from relay.client.discovery import Discovery
        from relay.client.relay_client import RelayClient
        from relay.lease_file import lease_file

        lease = lease_file(str(self.lease_dir), self.token, self.kmsn)
        discovery = Discovery.build(kmsn=self.kmsn, lease=lease, fallbacks=self.relays)

        def status(st: Any) -> None:
            if st.kind == "registered":
                self.history.record("info", "registered", proc=station, node=st.node, epoch=st.epoch)

        return RelayClient(role=role, kmsn=self.kmsn, station=station, token=self.token, discovery=discovery,
                           queue_size=100_000, on_status=status, **kw)  # fmt: skip

    async def _main(self) -> None:
        from relay.client.events import Received, ServerError

        self.loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        receiver = self._client("agent", "P01")
        producer = self.producer = self._client("commander", "C01", on_confirmed=self._confirmed)
        await receiver.start(timeout=60)
        await producer.start(timeout=60)
        self.started.set()

        async def receive() -> None:
            async for item in receiver.messages():
                if isinstance(item, Received) and item.id not in self.received:
                    self.received.add(item.id)
                    self.history.record("info", "recv", proc="P01", id=item.id, frm=item.sender_station)

        async def refusals() -> None:
            async for item in producer.messages():
                if isinstance(item, ServerError) and item.id is not None:
                    self.history.record("fail", "send", proc=f"C01/{item.id}", id=item.id, error=item.code)

        tasks = [asyncio.create_task(receive()), asyncio.create_task(refusals())]
        seq = 0
        while not self._stopping.is_set():
            if self.sending.is_set():
                seq += 1
                mid = f"c-{seq}"
                self.history.record("invoke", "send", proc=f"C01/{mid}", id=mid)
                await producer.send({"seq": seq}, to="P01", id=mid)
                self.sent = seq
            try:
                await asyncio.wait_for(self._stopping.wait(), self.every)
            except TimeoutError:
                pass
        await producer.close()
        await receiver.close()
        for task in tasks:
            task.cancel()

    def _confirmed(self, mid: Any) -> None:
        self.confirmed.add(mid)
        p = self.producer
        self.history.record("ok", "send", proc=f"C01/{mid}", id=mid, epoch=p.epoch if p else None,
                            node=p.node if p else None)  # fmt: skip

    def settled(self) -> bool:
        """Everything sent is confirmed and received (call after `sending.clear()`)."""
        p = self.producer
        return p is not None and p.pending == 0 and p.unconfirmed == 0 and self.confirmed <= self.received

    def stop(self) -> None:
        if self.loop is not None and self._stopping is not None:
            self.loop.call_soon_threadsafe(self._stopping.set)
        self.join(10)
