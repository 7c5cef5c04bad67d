"""The panel's HTTPS port answers plain HTTP with a redirect (issue 42).

Twisted's TLS endpoint takes a plain `GET` for a broken handshake and closes the connection:
`curl http://agent:8000/` got an empty reply and no hint. `PlainHintEndpoint` listens where the
`ssl:` endpoint would and looks at each connection's first byte: a TLS record (0x16, a
ClientHello) goes on to the very TLS protocol the `ssl:` endpoint would have built; anything else
is answered in plain HTTP, once, and closed: `301` to the same path on `https://` at this agent's
own address and port (never the client's `Host`: no open redirect), with a one-line body saying
so for clients that do not follow redirects. Nothing of it reaches the application.
"""

from __future__ import annotations

import re
from typing import Any

from twisted.internet import interfaces, protocol
from twisted.internet.endpoints import SSL4ServerEndpoint, TCP4ServerEndpoint
from twisted.protocols.tls import TLSMemoryBIOFactory
from zope.interface import implementer

TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a handshake (a ClientHello)
FIRST_LINE = 2048  # bytes looked at for a plain request's first line
GIVE_UP = 5.0  # seconds a plain client has to send its first line
_TARGET = re.compile(rb"[A-Z]{3,10} (/[!-~]{0,1000}) HTTP/1\.[01]")


def hint(host: str, port: int, first_line: bytes) -> bytes:
    """The plain answer to a request whose first line is `first_line`: a redirect to its path on https."""
    match = _TARGET.match(first_line)
    path = match.group(1).decode("ascii") if match else "/"
    where = f"[{host}]" if ":" in host else host
    url = f"https://{where}:{port}{path}"
    body = f"This port speaks HTTPS: {url}\n".encode("ascii")
    head = (f"HTTP/1.1 301 Moved Permanently\r\nLocation: {url}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")  # fmt: skip
    return head.encode("ascii") + body


class FirstByte(protocol.Protocol):
    """One connection until its first byte says TLS (then the TLS protocol takes it over) or not."""

    def __init__(self, factory: PlainHintFactory, addr: Any) -> None:
        self.factory, self.addr = factory, addr
        self.buffer = b""
        self.timer: Any = None

    def connectionMade(self) -> None:
        from twisted.internet import reactor

        self.timer = reactor.callLater(GIVE_UP, self._give_up)

    def dataReceived(self, data: bytes) -> None:
        if not self.buffer and data[:1] == bytes([TLS_HANDSHAKE]):
            self._cancel()
            tls = self.factory.tls.buildProtocol(self.addr)
            self.transport.protocol = tls  # the TCP transport reads into it now
            tls.makeConnection(self.transport)
            tls.dataReceived(data)
            return
        self.buffer += data
        if b"\n" in self.buffer or len(self.buffer) >= FIRST_LINE:
            self._answer()

    def connectionLost(self, reason: Any = None) -> None:
        self._cancel()

    def _answer(self) -> None:
        self._cancel()
        self.transport.write(hint(self.factory.host, self.factory.port, self.buffer.split(b"\r\n", 1)[0]))
        self.transport.loseConnection()

    def _give_up(self) -> None:
        self.timer = None
        self._answer()

    def _cancel(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None


class PlainHintFactory(protocol.ServerFactory):
    def __init__(self, tls: TLSMemoryBIOFactory, host: str, port: int) -> None:
        self.tls, self.host, self.port = tls, host, port

    def buildProtocol(self, addr: Any) -> FirstByte:
        return FirstByte(self, addr)


@implementer(interfaces.IStreamServerEndpoint)
class PlainHintEndpoint:
    """Listens as `ssl` (the endpoint it wraps) would, with a plain answer for plain HTTP."""

    def __init__(self, reactor: Any, ssl: SSL4ServerEndpoint) -> None:
        self.reactor, self.ssl = reactor, ssl

    def listen(self, factory: protocol.Factory) -> Any:
        ssl = self.ssl
        tls = TLSMemoryBIOFactory(ssl._sslContextFactory, False, factory)
        host = ssl._interface or "127.0.0.1"
        tcp = TCP4ServerEndpoint(self.reactor, ssl._port, backlog=ssl._backlog, interface=ssl._interface)
        return tcp.listen(PlainHintFactory(tls, host, ssl._port))


def server_from_string(parse: Any) -> Any:
    """`twisted.internet.endpoints.serverFromString` (`parse`), with every `ssl:` endpoint wrapped."""

    def make(reactor: Any, description: str) -> Any:
        endpoint = parse(reactor, description)
        return PlainHintEndpoint(reactor, endpoint) if isinstance(endpoint, SSL4ServerEndpoint) else endpoint

    return make
