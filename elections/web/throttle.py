"""Login throttling that costs next to nothing before a password is hashed.

A failed login costs one Argon2 hash (tens of milliseconds of CPU), and the
panel's views run one at a time: a flood of bad logins used to queue every
other page behind the hashes. `LoginThrottle` keeps two token buckets in
memory, both checked before the password is looked at:

- one per client address (`STK_LOGIN_ADDRESS_MAX_FAILURES` per
  `STK_LOGIN_WINDOW_S`, refilled evenly; IPv6 addresses count per /64, what one
  host can hold), and
- one for everyone together (`STK_LOGIN_GLOBAL_RATE` failed logins per second,
  `STK_LOGIN_GLOBAL_BURST` at once), which bounds the hashing a flood from many
  addresses can cause, and so the rows `LoginFailure` keeps.

An attempt takes a token from both (or neither: then the answer is 429 with
the wait); a successful login gives them back, so only failures spend them.
Memory is bounded: at most `MAX_ADDRESSES` address buckets are kept, the least
recently used dropped first (a dropped bucket had mostly refilled; the global
bucket still holds). The per-(user, address) limit stays in the database
(`elections.audit.LoginFailure`), checked after these.

A flood must not fill the log either: Django's own "Too Many Requests" line
per refusal is dropped (`DropThrottled`, a filter on the console handler) and
the throttle logs one summary line per `LOG_EVERY_S` while it refuses.

The clock is injected (`elections.ports.clock`); the process-wide throttle is
`login_throttle()`, rebuilt when its settings change.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections import OrderedDict

from django.conf import settings

from elections.ports.clock import Clock, SystemClock

MAX_ADDRESSES = 4096
LOG_EVERY_S = 60.0
log = logging.getLogger("stkrelay.login")


class DropThrottled(logging.Filter):
    """Drop django.request's line for each 429 (the throttle logs a summary instead)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "django.request" and getattr(record, "status_code", None) == 429)


class TokenBucket:
    """`burst` tokens, refilled at `rate` per second; one token per failed login."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = float(burst), now

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.stamp) * self.rate)
        self.stamp = now

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0: one is there now)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self) -> None:
        self.tokens -= 1  # after wait() said 0

    def give(self) -> None:
        self.tokens = min(self.burst, self.tokens + 1)


def address_key(ip: str) -> str:
    """What one client can hold: an IPv4 address, an IPv6 /64."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip[:64]
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.ip_network(f"{addr}/64", strict=False))
    return str(addr)


class LoginThrottle:
    def __init__(
        self,
        address_max: int,
        window_s: float,
        rate: float,
        burst: int,
        clock: Clock | None = None,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        self.clock = clock or SystemClock()
        self.address_max, self.window_s, self.max_addresses = address_max, window_s, max_addresses
        self.everyone = TokenBucket(rate, burst, self.clock.monotonic())
        self.addresses: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()
        self.refused, self._logged_at = 0, self.clock.monotonic() - LOG_EVERY_S

    def _bucket(self, key: str, now: float) -> TokenBucket:
        bucket = self.addresses.get(key)
        if bucket is None:
            bucket = TokenBucket(self.address_max / self.window_s, self.address_max, now)
            self.addresses[key] = bucket
            while len(self.addresses) > self.max_addresses:
                self.addresses.popitem(last=False)
        else:
            self.addresses.move_to_end(key)
        return bucket

    def acquire(self, ip: str) -> float:
        """Take a token for one login attempt from `ip`: 0.0 when taken, else the
        seconds to wait (nothing taken)."""
        with self._lock:
            now = self.clock.monotonic()
            mine = self._bucket(address_key(ip), now)
            wait = max(mine.wait(now), self.everyone.wait(now))
            if wait:
                self._note_refusal(now, mine.tokens < 1)
                return wait
            mine.take()
            self.everyone.take()
            return 0.0

    def _note_refusal(self, now: float, by_address: bool) -> None:
        self.refused += 1
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning(
                "login throttled: %d attempt(s) refused since the last report (%s limit; %d addresses)",
                self.refused, "per-address" if by_address else "global", len(self.addresses),
            )  # fmt: skip
            self.refused, self._logged_at = 0, now

    def refund(self, ip: str) -> None:
        """The attempt did not fail (it logged in, or was refused before hashing)."""
        with self._lock:
            self.everyone.give()
            bucket = self.addresses.get(address_key(ip))
            if bucket is not None:
                bucket.give()


_current: tuple[tuple[float, ...], LoginThrottle] | None = None
_current_lock = threading.Lock()


def login_throttle() -> LoginThrottle:
    """The process's throttle, built from the STK_LOGIN_* settings (rebuilt if they change)."""
    global _current
    params = (
        float(settings.STK_LOGIN_ADDRESS_MAX_FAILURES),
        float(settings.STK_LOGIN_WINDOW_S),
        float(settings.STK_LOGIN_GLOBAL_RATE),
        float(settings.STK_LOGIN_GLOBAL_BURST),
    )
    with _current_lock:
        if _current is None or _current[0] != params:
            address_max, window, rate, burst = params
            _current = (params, LoginThrottle(int(address_max), window, rate, int(burst)))
        return _current[1]


def reset() -> None:
    """Forget every bucket (tests)."""
    global _current
    with _current_lock:
        _current = None
