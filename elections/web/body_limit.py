"""Request bodies are bounded before Django sees them, and a refused request is one
log line, not two tracebacks.

Anyone who can reach the web port can send a 20 MB body. Django refuses it
(`RequestDataTooBig`) — after the whole body was received and spooled, and with
a 40-line traceback logged twice (Django's logger, then Daphne's root handler)
per request: log amplification for free. `BodyLimit`, an ASGI middleware in
front of the Django app:

- answers `413` at once to a `Content-Length` over `limit`, before reading a
  byte of the body, and to a chunked body as soon as it passes `limit`
  (the bytes are counted as they arrive, at most `limit` kept);
- writes one line per refused request — the cause (`too_large`, or
  `malformed` for a body the app answered 400), the peer, method and path —
  at most one line per peer per `LOG_EVERY_S`, the next one saying how many
  were left out (`PeerLogLimit`, bounded to `MAX_PEERS` peers);
- and, with `QuietRefusals` on Django's loggers, keeps Django's own lines for
  those requests out of the log.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from stkhost.clock import Clock, SystemClock

log = logging.getLogger("stkrelay.web")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOG_EVERY_S = 60.0
MAX_PEERS = 1024
TOO_LARGE, MALFORMED = "too_large", "malformed"


class PeerLogLimit:
    """At most one line per peer per `every` seconds (on the injected clock)."""

    def __init__(self, every: float = LOG_EVERY_S, clock: Clock | None = None, max_peers: int = MAX_PEERS):
        self.every, self.clock, self.max_peers = every, clock or SystemClock(), max_peers
        self._peers: OrderedDict[str, tuple[float, int]] = OrderedDict()  # peer -> (last line at, left out)
        self._lock = threading.Lock()

    def admit(self, peer: str) -> int | None:
        """None: stay quiet. Else a line may be written now; the number is how many
        lines of this peer were left out since its last one."""
        with self._lock:
            now = self.clock.monotonic()
            last = self._peers.get(peer)
            if last is not None and now - last[0] < self.every:
                self._peers[peer] = (last[0], last[1] + 1)
                return None
            self._peers[peer] = (now, 0)
            self._peers.move_to_end(peer)
            while len(self._peers) > self.max_peers:
                self._peers.popitem(last=False)
            return last[1] if last is not None else 0


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return None


class BodyLimit:
    def __init__(self, app: App, limit: int, lines: PeerLogLimit | None = None) -> None:
        self.app, self.limit = app, limit
        self.lines = lines or PeerLogLimit()
        self.refused = {TOO_LARGE: 0, MALFORMED: 0}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and (declared > self.limit or declared < 0):
            await self._refuse(scope, send, TOO_LARGE, f"Content-Length {declared} > {self.limit}")
            return
        body: list[bytes] = []
        size = 0
        while True:  # the whole body, counted as it comes: at most `limit` bytes kept
            message = await receive()
            if message.get("type") == "http.disconnect":
                return
            chunk = message.get("body") or b""
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, send, TOO_LARGE, f"body past {self.limit} bytes")
                return
            body.append(chunk)
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(body), "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        async def watch(message: Message) -> None:
            if message.get("type") == "http.response.start" and message.get("status") == 400 and size:
                self._note(scope, MALFORMED, f"{size}-byte body answered 400")
            await send(message)

        await self.app(scope, replay, watch)

    async def _refuse(self, scope: Scope, send: Send, cause: str, detail: str) -> None:
        self._note(scope, cause, detail)
        api = str(scope.get("path", "")).startswith("/api/")
        if api:
            payload = json.dumps({"error": "too_large", "message": f"request body over {self.limit} bytes"})
            body, ctype = payload.encode(), b"application/json"
        else:
            body, ctype = f"Request body over {self.limit} bytes.\n".encode(), b"text/plain; charset=utf-8"
        headers = [
            (b"content-type", ctype),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    def _note(self, scope: Scope, cause: str, detail: str) -> None:
        self.refused[cause] += 1
        peer = _peer(scope)
        left_out = self.lines.admit(peer)
        if left_out is None:
            return
        more = f" ({left_out} more from this peer not logged)" if left_out else ""
        method, path = scope.get("method", "?"), str(scope.get("path", ""))[:200]
        log.warning("refused request (%s) from %s: %s %s: %s%s", cause, peer, method, path, detail, more)


class QuietRefusals(logging.Filter):
    """On Django's loggers: drop its lines for requests `BodyLimit` reports itself
    (400 Bad Request, 413, and `RequestDataTooBig` with its traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "django.security.RequestDataTooBig":
            return False
        return not (record.name == "django.request" and getattr(record, "status_code", None) in (400, 413))
