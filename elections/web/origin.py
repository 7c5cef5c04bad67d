"""The WebSocket routes' Origin check (cross-site WebSocket hijacking).

A browser sends its session cookie with a WebSocket handshake to our address
whatever page opened it, and WebSockets are not bound by the same-origin
policy: without this check, any page a logged-in operator visits could watch
`/ws/stream/<station>/` as that operator. Browsers always send `Origin` on a
WebSocket handshake (RFC 6455 §4.1), so:

- an `Origin` whose host is not in `ALLOWED_HOSTS` (this agent's addresses,
  loopback, WEB_ALLOWED_HOSTS; the port is not compared) is refused, on every
  route; `Origin: null` (sandboxed frames, files) too;
- a missing `Origin` means a non-browser client, which has no ambient
  credentials to abuse. It is allowed on the paths in `allow_missing`
  (`/ws/relay/`: relay clients authenticate in the relay handshake with the
  site token, exactly as on the TCP port) and refused elsewhere (`/ws/stream/`
  rides on the session cookie).

The refusal happens before the session is read; the handshake gets HTTP 403
(in tests, a close with code `REFUSED`). Built on channels' `OriginValidator`,
reading `settings.ALLOWED_HOSTS` at each connection.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlparse

from channels.security.websocket import OriginValidator
from django.conf import settings

log = logging.getLogger("stkrelay.ws")

REFUSED = 4403


class OriginCheck(OriginValidator):
    def __init__(self, application: Any, allow_missing: tuple[str, ...] = ()) -> None:
        super().__init__(application, allowed_origins=())
        self.allow_missing = allow_missing

    def allowed(self, origin: Any) -> bool:
        """The origin's host is one of ALLOWED_HOSTS (read now: tests override it)."""
        return any(self.match_allowed_origin(origin, host) for host in settings.ALLOWED_HOSTS if host != "*")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("OriginCheck guards WebSocket connections only")
        origins = [value for name, value in scope.get("headers", []) if name == b"origin"]
        if not origins:
            allowed = scope.get("path", "") in self.allow_missing
            why = "no Origin header"
        else:
            try:
                origin = urlparse(origins[-1].decode("latin1"))
            except ValueError:
                origin = None
            allowed = len(origins) == 1 and origin is not None and self.allowed(origin)
            why = f"Origin {origins[-1].decode('latin1')!r}"
        if allowed:
            return await self.application(scope, receive, send)
        client = (scope.get("client") or ["?"])[0]
        log.warning("websocket %s from %s refused: %s not allowed", scope.get("path"), client, why)
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": REFUSED})
        return None
