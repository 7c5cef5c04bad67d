"""One `INFO server` of this agent's Redis over a plain socket, without redis-py (issue 41).

The supervisor pings its Redis for the server's `run_id` and nothing else; redis-py, for that,
is ~9 MiB of the supervisor's private memory (its asyncio and cluster clients, and
`importlib.metadata` with the `email` package for its version), a third of the process. Here:
a connection (TCP, or a unix socket), `AUTH` when the URL has a password (with its user name,
or without it for a Redis older than 6), `INFO server`, the reply read up to `MAX_REPLY`
bytes, within `timeout` each. A `rediss://` URL (TLS and its options) goes to redis-py
(`RedisLink`). The URL is read as redis-py reads it (`parse_url`): what it refuses is refused
here with its words, and the reasons are its kind (refused, timed out, the server's error).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from elections.errors import RedisUnavailable

MAX_REPLY = 1 << 20  # INFO server is ~1.5 KiB; a reply longer than this is no Redis's
SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class RedisPlace:
    path: str | None  # a unix socket
    host: str
    port: int
    username: str | None
    password: str | None
    tls: bool

    @classmethod
    def of(cls, url: str) -> RedisPlace:
        """Where `url` says; ValueError with redis-py's words for what it would refuse."""
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES or not url.startswith(f"{parts.scheme}://"):
            raise ValueError(
                "Redis URL must specify one of the following schemes (redis://, rediss://, unix://)"
            )
        query = {name: values[0] for name, values in parse_qs(parts.query).items() if values}
        username = unquote(parts.username) if parts.username else query.get("username")
        password = unquote(parts.password) if parts.password else query.get("password")
        if parts.scheme == "unix":
            return cls(unquote(parts.path) or None, "localhost", 6379, username, password, False)
        port = parts.port  # ValueError: "Port could not be cast to integer value as ..."
        host = unquote(parts.hostname) if parts.hostname else "localhost"
        return cls(None, host, port or 6379, username, password, parts.scheme == "rediss")

    @property
    def shown(self) -> str:
        return self.path if self.path else f"{self.host}:{self.port}"


def server_run_id(place: RedisPlace, timeout: float) -> str:
    """The server's `run_id` (one `INFO server`); RedisUnavailable with the reason otherwise."""
    try:
        if place.path:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(place.path)
            except BaseException:
                sock.close()
                raise
        else:
            sock = socket.create_connection((place.host, place.port), timeout=timeout)
    except TimeoutError:
        raise RedisUnavailable(f"Timeout connecting to {place.shown}") from None
    except OSError as exc:
        why = exc.strerror or exc
        raise RedisUnavailable(f"Error {exc.errno} connecting to {place.shown}. {why}.") from None
    with sock:
        pending = bytearray()
        try:
            if place.password is not None:
                user = [place.username] if place.username else []
                said = _ask(sock, pending, b"AUTH", *user, place.password)
                if said.startswith("-ERR wrong number of arguments") and place.username:
                    said = _ask(sock, pending, b"AUTH", place.password)  # a Redis older than 6: no users
                if not said.startswith("+"):
                    raise RedisUnavailable(_error(said))
            info = _ask(sock, pending, b"INFO", b"server")
        except TimeoutError:
            raise RedisUnavailable(f"Timeout reading from {place.shown}") from None
        except OSError as exc:
            raise RedisUnavailable(f"Error while reading from {place.shown}: {exc.strerror or exc}") from None
    if not info.startswith("$"):
        raise RedisUnavailable(_error(info))
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key == "run_id":
            return value.strip()
    return ""


def _error(said: str) -> str:
    return said[1:].strip()[:200] if said.startswith("-") else f"unexpected reply {said[:40]!r}"


# One RESP2 reply per command: a simple line ("+OK", "-ERR ...") or, for a bulk string, "$" and
# its text. `pending` holds what was read beyond the reply so far.


def _ask(sock: socket.socket, pending: bytearray, *words: str | bytes) -> str:
    parts = [w.encode() if isinstance(w, str) else w for w in words]
    sock.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
    line = _line(sock, pending)
    if not line.startswith(b"$"):
        return line.decode("utf-8", "replace")
    try:
        size = int(line[1:])
    except ValueError:
        return f"unexpected reply {line[:40]!r}"
    if size < 0 or size > MAX_REPLY:
        return f"unexpected reply size {size}"
    return "$" + _exactly(sock, pending, size + 2)[:size].decode("utf-8", "replace")


def _line(sock: socket.socket, pending: bytearray) -> bytes:
    while (end := pending.find(b"\r\n")) < 0:
        _more(sock, pending)
    line = bytes(pending[:end])
    del pending[: end + 2]
    return line


def _exactly(sock: socket.socket, pending: bytearray, n: int) -> bytes:
    while len(pending) < n:
        _more(sock, pending)
    out = bytes(pending[:n])
    del pending[:n]
    return out


def _more(sock: socket.socket, pending: bytearray) -> None:
    if len(pending) > MAX_REPLY + 64:
        raise OSError("reply too long")
    data = sock.recv(65536)
    if not data:
        raise OSError("Connection closed by server.")
    pending += data
