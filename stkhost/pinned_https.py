"""HTTPS to agents' panels from Python: verified by pinned fingerprints or by a CA file.

An agent's certificate is usually the self-signed one it made at first start
(`elections.ports.local.webcert`), which no CA vouches for. A client then pins it: it
accepts a server whose certificate's SHA-256 fingerprint is one of `pins`
(`relayctl tls` on each agent prints its own; every panel shows all members'),
whatever names the certificate holds, and refuses any other before a byte of
the request (a bearer token, a password) is sent. With the operator's own
certificates (`TLS_CERT`), a client may take their CA file instead (`ca_file`:
the usual chain and host-name verification). Without either, the system's CAs.

`opener(pins, ca_file)` is a `urllib` opener that never goes through an
`http_proxy` from the environment (agents are on the LAN); with `redirects=False`
it never follows a 3xx either: the answer is an `HTTPError` of its code (the
webhook's signed body and headers go to the configured URL and nowhere else).
"""

from __future__ import annotations

import http.client
import ssl
import urllib.request
from collections.abc import Iterable
from email.message import Message
from typing import IO

from stkhost.fingerprints import fingerprint


class PinMismatch(ssl.SSLError):
    """The server's certificate is not one of the pinned fingerprints."""


def client_context(pinned: bool, ca_file: str | None = None) -> ssl.SSLContext:
    """TLS 1.2+; with `pinned`, no chain or name check (the pin is checked after the handshake)."""
    ctx = ssl.create_default_context(cafile=ca_file or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if pinned:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def check_pin(sock: ssl.SSLSocket, pins: frozenset[str]) -> None:
    """Raise PinMismatch unless the peer's certificate is pinned."""
    der = sock.getpeercert(binary_form=True)
    seen = fingerprint(der) if der else ""
    if seen not in pins:
        raise PinMismatch(f"certificate SHA-256 {seen or 'none'} is not pinned")


class _PinnedConnection(http.client.HTTPSConnection):
    pins: frozenset[str] = frozenset()

    def connect(self) -> None:
        super().connect()
        try:
            check_pin(self.sock, self.pins)
        except PinMismatch:
            self.sock.close()
            raise


class _PinnedHandler(urllib.request.HTTPSHandler):
    def __init__(self, pins: frozenset[str]) -> None:
        self.pinned_context = client_context(pinned=True)
        super().__init__(context=self.pinned_context)
        chosen = pins

        class PinnedConnection(_PinnedConnection):
            pins = chosen

        self.connection = PinnedConnection

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self.connection, req, context=self.pinned_context)


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """In place of urllib's own redirect handler (which would send the request again to any
    `Location`, http:// too): no new request, so the 3xx is raised as an `HTTPError`."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Message, newurl: str
    ) -> urllib.request.Request | None:
        return None


def opener(
    pins: Iterable[str] = (), ca_file: str | None = None, redirects: bool = True
) -> urllib.request.OpenerDirector:
    """A urllib opener for agents' panels: pinned when `pins`, else verified against `ca_file`;
    without `redirects`, a 3xx is an `HTTPError`, never followed."""
    pinned = frozenset(pins)
    https: urllib.request.HTTPSHandler = _PinnedHandler(pinned)
    if not pinned:
        https = urllib.request.HTTPSHandler(context=client_context(False, ca_file))
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({}), https]
    if not redirects:
        handlers.append(_RefuseRedirects())  # build_opener then leaves urllib's own out
    return urllib.request.build_opener(*handlers)
