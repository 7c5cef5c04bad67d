"""This agent's own Redis (`REDIS_URL`) as its supervisor looks at it: a ping, and a
bare connection held open to learn at once that the server went away.

`ping()` asks the server for its `run_id` (one `INFO server`, bounded by `timeout`),
which changes at every start of a redis-server: a Redis that restarted between two
looks is told from one that never went. It raises `RedisUnavailable` with the
reason (refused, timed out, wrong password...), never anything else.

`watch()` opens a plain TCP (or unix socket) connection that sends nothing: the
server keeps an idle client for ever (`timeout 0`, its default), so the socket
becomes readable only when the server closes it, which a killed redis-server's
kernel does at once. Its file descriptor joins the supervisor's wait: a dead
Redis wakes the supervisor, no poll needed. A `rediss://` URL has no watch (a bare
connection would be a TLS handshake never finished); it is pinged at every pass.
`shown` is the URL without its password, for logs, `/healthz` and `relayctl doctor`.
"""

from __future__ import annotations

import contextlib
import socket
from urllib.parse import urlsplit, urlunsplit

from elections.errors import RedisUnavailable
from elections.ports.local.redis_info import RedisPlace, server_run_id


def shown_url(url: str) -> str:
    """`url` with any password replaced by `***` (a log line, a page, a doctor line)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class RedisLink:
    """One agent's Redis: `ping()` for its run id, `watch()` for the end of the server."""

    def __init__(self, url: str, timeout: float = 1.0) -> None:
        self.url = url
        self.shown = shown_url(url)
        self.timeout = timeout
        self._unusable = ""  # why REDIS_URL names no server (a bad port): every ping says it
        try:
            self._place: RedisPlace | None = RedisPlace.of(url)
        except ValueError as exc:
            self._place, self._unusable = None, f"REDIS_URL cannot be used: {exc}"
        self._path = self._place.path if self._place is not None else None
        self._addr = (self._place.host, self._place.port) if self._place is not None else ("localhost", 6379)
        self._tls = url.startswith("rediss://")
        self._watch: socket.socket | None = None

    def ping(self) -> str:
        """The server's run id (it changes when the server restarts); `RedisUnavailable` if none.
        Without redis-py but for TLS (`redis_info`: the supervisor does not load it, issue 41)."""
        if self._unusable:
            raise RedisUnavailable(self._unusable)
        if self._place is not None and not self._tls:
            return server_run_id(self._place, self.timeout)
        return self._ping_tls()

    def _ping_tls(self) -> str:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = None
        try:
            client = redis.Redis.from_url(self.url, socket_timeout=self.timeout,
                                          socket_connect_timeout=self.timeout, retry=Retry(NoBackoff(), 0),
                                          single_connection_client=True)  # fmt: skip
            info = client.info("server")
        except (redis.RedisError, OSError, ValueError) as exc:
            raise RedisUnavailable(_reason(exc)) from None
        finally:
            if client is not None:
                with contextlib.suppress(redis.RedisError, OSError):
                    client.close()
        return str(info.get("run_id", "")) if isinstance(info, dict) else ""

    def watch(self) -> int | None:
        """The descriptor of the held connection (opened if need be); None for TLS or
        when it cannot be opened (the caller pings instead)."""
        if self._tls or self._unusable:
            return None
        if self._watch is None:
            family = socket.AF_UNIX if self._path else socket.AF_INET
            if not self._path and ":" in self._addr[0]:
                family = socket.AF_INET6
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self._path or self._addr)
            except OSError:
                sock.close()
                return None
            sock.setblocking(False)
            self._watch = sock
        return self._watch.fileno()

    def watch_ended(self) -> bool:
        """The held connection was closed by the server (or broke). True also when there is none."""
        if self._watch is None:
            return True
        try:
            data = self._watch.recv(4096, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if data:  # a server does not speak first: read it away, the connection lives
            with contextlib.suppress(OSError):
                self._watch.recv(len(data))
            return False
        self.close()
        return True

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None


def _reason(exc: BaseException) -> str:
    """A short reason from redis-py's error (its text names the address already)."""
    text = str(exc).strip().rstrip(".") or type(exc).__name__
    return text.splitlines()[0][:200]
