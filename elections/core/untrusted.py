"""The one guarded reader of bytes from outside (DESIGN.md §5.4): share files,
event lines, datagrams, frames, API bodies.

`load_object(raw, limits)` returns a JSON object or raises `Untrusted` with a
short, stable `cause` and a readable detail; it never raises anything else.
Size is checked before parsing and nesting depth is bounded by a scan before
`json.loads` sees the bytes, so deeply nested input (~100 KB of `[`) is
refused in linear time instead of raising `RecursionError` from the parser.
Whatever is refused is "no evidence" to the caller: it logs, counts and shows
the cause, and acts on nothing.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# Causes (stable: they label the security counter on /metrics).
TOO_LARGE = "too_large"
TOO_DEEP = "too_deep"
NOT_UTF8 = "not_utf8"
NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
UNSIGNED = "unsigned"
FORGED = "forged"
REPLAYED = "replayed"
WRONG_NODE = "wrong_node"
NOT_A_FILE = "not_a_file"
UNREADABLE = "unreadable"
TOO_MANY = "too_many"
WRONG_KMSN = "wrong_kmsn"  # a beacon of another pool (core.beacons)
SPLIT_BRAIN = "split_brain"  # two validly signed leader beacons of different nodes claim one epoch
# the site token refused for a station bound to its credential (core.stations, relay.bindings)
IMPERSONATION = "impersonation"
CAUSES = (TOO_LARGE, TOO_DEEP, NOT_UTF8, NOT_JSON, NOT_OBJECT, UNSIGNED, FORGED, REPLAYED, WRONG_NODE,
          NOT_A_FILE, UNREADABLE, TOO_MANY, WRONG_KMSN, SPLIT_BRAIN, IMPERSONATION)  # fmt: skip

_ESCAPE = re.compile(rb"\\.", re.S)  # one backslash escape (non-overlapping, left to right)
_STRING = re.compile(rb'"[^"]*"')  # a string once its escapes are gone: linear, no backtracking
_OPEN = frozenset(b"[{")
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_depth: int = 16


LEASE = Limits(16 << 10)
LOCK = Limits(4 << 10, max_depth=4)
MEMBER = Limits(16 << 10)
EVENT_LINE = Limits(64 << 10)
LOCAL = Limits(4 << 20, max_depth=32)  # this agent's own data-directory files
API_BODY = Limits(64 << 10, max_depth=8)  # a JSON body of the panel's API
LEADER_ANSWER = Limits(64 << 10, max_depth=8)  # another agent's /api/v1/leader answer


class Untrusted(ValueError):
    """Bytes from outside that are not evidence: `cause` is one of CAUSES."""

    def __init__(self, cause: str, detail: str) -> None:
        self.cause = cause
        self.detail = detail
        super().__init__(detail)


def nesting_depth(raw: bytes, stop_above: int) -> int:
    """The deepest nesting of arrays/objects in `raw` (strings ignored), or
    `stop_above + 1` as soon as it goes past `stop_above`."""
    depth = deepest = 0
    structure = _STRING.sub(b"", _ESCAPE.sub(b"", raw).translate(None, _NOT_STRUCTURE))
    for byte in structure.replace(b'"', b""):
        if byte in _OPEN:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_above:
                    return deepest
        elif depth:
            depth -= 1
    return deepest


def load_json(raw: bytes, limits: Limits, what: str = "input") -> Any:
    """Parse bounded JSON; `Untrusted` for anything that is not."""
    if len(raw) > limits.max_bytes:
        raise Untrusted(TOO_LARGE, f"{what} is {len(raw)} bytes > {limits.max_bytes}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Untrusted(NOT_UTF8, f"{what} is not UTF-8") from None
    if nesting_depth(raw, limits.max_depth) > limits.max_depth:
        raise Untrusted(TOO_DEEP, f"{what} nests deeper than {limits.max_depth}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError, MemoryError) as exc:
        msg = getattr(exc, "msg", type(exc).__name__)
        raise Untrusted(NOT_JSON, f"{what} is not JSON ({msg})") from None


def load_object(raw: bytes, limits: Limits, what: str = "input") -> dict[str, Any]:
    doc = load_json(raw, limits, what)
    if not isinstance(doc, dict):
        raise Untrusted(NOT_OBJECT, f"{what} is not a JSON object")
    return doc
