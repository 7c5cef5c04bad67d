"""Login throttling that costs next to nothing before a password is hashed, and
that strangers cannot turn against the operators.

A failed login costs one Argon2 hash (tens of milliseconds of CPU), and the
panel's views run one at a time: a flood of bad logins used to queue every
other page behind the hashes. `LoginThrottle` keeps token buckets in memory,
all checked before the password is looked at:

- one per client address (`STK_LOGIN_ADDRESS_MAX_FAILURES` per
  `STK_LOGIN_WINDOW_S`, refilled evenly; IPv6 addresses count per /64, what one
  host can hold): an address that spent it is **locked out** until it refills,
  or until an operator clears it (`clear`, the panel's lockouts page);
- one for everyone together (`STK_LOGIN_GLOBAL_RATE` failed logins per second,
  `STK_LOGIN_GLOBAL_BURST` at once), which bounds the hashing a flood from many
  addresses can cause, and so the rows `LoginFailure` keeps;
- a **reserve** (`STK_LOGIN_RESERVE_RATE`, `STK_LOGIN_RESERVE_BURST`) that only a
  *clean* address may draw on once the global bucket is empty: one that has not
  failed within the window. Strangers who fail spread over a few addresses (the
  issue-28 scenario: ~0.5 bad logins a second over 8 addresses) empty the
  global bucket but never the reserve, since each of their addresses is unclean
  after its first failure; an operator's first attempt from anywhere else
  still gets its hash. Draining the reserve needs a fresh address for every
  one of its tokens, for as long as the attack lasts.

Two more ways in never touch the global bucket (`elections.web.panel.login`):
a browser that has logged in as that user before presents a signed device
cookie (`elections.web.device`: OWASP's "device cookies"), and a client on
this machine (loopback) is an operator at the agent's console. Each is still
limited by the per-(user, client) failures in the database
(`elections.audit.LoginFailure`), so neither is a way to guess faster.

An attempt takes a token (from the address bucket, and from the global bucket
or the reserve), or nothing: then the answer is 429 with the wait; a
successful login gives the tokens back, so only failures spend them. Memory is
bounded: at most `MAX_ADDRESSES` address buckets are kept, the least recently
used dropped first (a dropped bucket had mostly refilled; the global bucket
still holds).

A flood must not fill the log either: Django's own "Too Many Requests" line
per refusal is dropped (`stkconfig.drop_throttled`, a filter on the console handler) and
the throttle logs one summary line per `LOG_EVERY_S` while it refuses;
`refused` counts refusals by scope for `/metrics`.

The clock is injected (`stkhost.clock`); the process-wide throttle is
`login_throttle()`, rebuilt when its settings change.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

from django.conf import settings

from stkhost.clock import Clock, SystemClock

MAX_ADDRESSES = 4096
LOG_EVERY_S = 60.0
log = logging.getLogger("stkrelay.login")


class TokenBucket:
    """`burst` tokens, refilled at `rate` per second; one token per failed login."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = float(burst), now
        self.failed_at: float | None = None  # when a token was last taken and not given back

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.stamp) * self.rate)
        self.stamp = now

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0: one is there now)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self, now: float) -> None:
        self.tokens -= 1  # after wait() said 0
        self.failed_at = now

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


@dataclass(frozen=True)
class Lockout:
    """An address that may not try again for `wait_s` (the panel, `/metrics`)."""

    address: str
    wait_s: float


ADDRESS, GLOBAL = "address", "global"  # what refused an attempt


class LoginThrottle:
    def __init__(
        self,
        address_max: int,
        window_s: float,
        rate: float,
        burst: int,
        clock: Clock | None = None,
        max_addresses: int = MAX_ADDRESSES,
        reserve_rate: float = 0.0,
        reserve_burst: int = 0,
    ) -> None:
        self.clock = clock or SystemClock()
        self.address_max, self.window_s, self.max_addresses = address_max, window_s, max_addresses
        now = self.clock.monotonic()
        self.everyone = TokenBucket(rate, burst, now)
        self.reserve = TokenBucket(reserve_rate or 1e-9, reserve_burst, now)
        self.addresses: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()
        self.refused = {ADDRESS: 0, GLOBAL: 0}  # since start, for /metrics
        self._unreported, self._logged_at = 0, now - LOG_EVERY_S
        self._drawn: dict[str, list[TokenBucket]] = {}  # address -> buckets its last attempt drew on

    def _bucket(self, key: str, now: float) -> TokenBucket:
        bucket = self.addresses.get(key)
        if bucket is None:
            bucket = TokenBucket(self.address_max / self.window_s, self.address_max, now)
            self.addresses[key] = bucket
            while len(self.addresses) > self.max_addresses:
                gone, _ = self.addresses.popitem(last=False)
                self._drawn.pop(gone, None)
        else:
            self.addresses.move_to_end(key)
        return bucket

    def _clean(self, bucket: TokenBucket, now: float) -> bool:
        """No failure from this address within the window."""
        return bucket.failed_at is None or now - bucket.failed_at >= self.window_s

    def acquire(self, ip: str, everyone: bool = True) -> float:
        """Take a token for one login attempt from `ip`: 0.0 when taken, else the
        seconds to wait (nothing taken). `everyone=False`: an attempt the global
        bucket does not bound (a device cookie, the console); the address still does."""
        with self._lock:
            now = self.clock.monotonic()
            key = address_key(ip)
            mine = self._bucket(key, now)
            wait = mine.wait(now)
            if wait:
                return self._refusal(now, ADDRESS, wait)
            shared: list[TokenBucket] = []
            if everyone:
                wait = self.everyone.wait(now)
                if not wait:
                    shared = [self.everyone]
                elif self._clean(mine, now) and not self.reserve.wait(now):
                    shared = [self.reserve]  # a clean address is never locked out by strangers
                else:
                    return self._refusal(now, GLOBAL, wait)
            for bucket in (mine, *shared):
                bucket.take(now)
            self._drawn[key] = [mine, *shared]
            return 0.0

    def _refusal(self, now: float, scope: str, wait: float) -> float:
        self.refused[scope] += 1
        self._unreported += 1
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning(
                "login throttled: %d attempt(s) refused since the last report (%s limit; %d addresses)",
                self._unreported, "per-address" if scope == ADDRESS else "global", len(self.addresses),
            )  # fmt: skip
            self._unreported, self._logged_at = 0, now
        return wait

    def refund(self, ip: str) -> None:
        """The attempt did not fail (it logged in, or was refused before hashing):
        its tokens go back where they came from, and the address is clean again."""
        with self._lock:
            for bucket in self._drawn.pop(address_key(ip), []):
                bucket.give()
            mine = self.addresses.get(address_key(ip))
            if mine is not None and mine.tokens >= mine.burst:
                mine.failed_at = None

    def lockouts(self) -> list[Lockout]:
        """Addresses that must wait before their next attempt, longest wait first."""
        with self._lock:
            now = self.clock.monotonic()
            out = [Lockout(key, b.wait(now)) for key, b in self.addresses.items()]
        return sorted((x for x in out if x.wait_s > 0), key=lambda x: -x.wait_s)

    def clear(self, address: str | None = None) -> int:
        """An operator lifts the lockout of one address (None: of every address). Returns how many."""
        with self._lock:
            keys = [address_key(address)] if address is not None else list(self.addresses)
            cleared = 0
            for key in keys:
                bucket = self.addresses.pop(key, None)
                self._drawn.pop(key, None)
                if bucket is not None:
                    cleared += bucket.wait(self.clock.monotonic()) > 0
            return cleared


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
        float(settings.STK_LOGIN_RESERVE_RATE),
        float(settings.STK_LOGIN_RESERVE_BURST),
    )
    with _current_lock:
        if _current is None or _current[0] != params:
            address_max, window, rate, burst, reserve_rate, reserve_burst = params
            gate = LoginThrottle(int(address_max), window, rate, int(burst),
                                 reserve_rate=reserve_rate, reserve_burst=int(reserve_burst))  # fmt: skip
            _current = (params, gate)
        return _current[1]


def reset() -> None:
    """Forget every bucket (tests)."""
    global _current
    with _current_lock:
        _current = None
