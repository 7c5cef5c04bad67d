"""The one guarded reader of bytes from outside (docs/design.md §5.4): share files,
event lines, datagrams, frames, API bodies.

`load_object(raw, limits)` returns a JSON object or raises `Untrusted` with a
short, stable `cause` and a readable detail; it never raises anything else.
`check_event(doc)` then refuses (`bad_field`) a record whose fields have the
wrong type or are out of range — a seq or an epoch that is not a whole number
from 0 to `MAX_COUNTER` (what a signed 64-bit database column holds, with room
for one more), a kind or reason that is not text — so one such record is "no
evidence" on its own and never costs the rest of its batch.
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
from typing import Any, TypeGuard, TypeVar

D = TypeVar("D", int, None)

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
# the site token refused for a station bound to its credential (core.stations, relay.server.bindings)
IMPERSONATION = "impersonation"
BAD_FIELD = "bad_field"  # a field of the wrong type or out of range (a seq of 2**63, an epoch "x")
# text that parses but no UTF-8 can hold: a lone surrogate escape (`"\\ud800"`) is valid JSON, and the
# signature check's `canonical_json(...).encode()` would raise on it
UNENCODABLE = "unencodable"
CAUSES = (TOO_LARGE, TOO_DEEP, NOT_UTF8, NOT_JSON, NOT_OBJECT, UNSIGNED, FORGED, REPLAYED, WRONG_NODE,
          NOT_A_FILE, UNREADABLE, TOO_MANY, WRONG_KMSN, SPLIT_BRAIN, BAD_FIELD,
          IMPERSONATION, UNENCODABLE)  # fmt: skip
# What a pool's record or event line is refused for that someone may have done on purpose:
# logged as SECURITY, at ERROR (the rest are damage, at WARNING).
SECURITY_CAUSES = frozenset({UNSIGNED, FORGED, REPLAYED, WRONG_NODE, BAD_FIELD, UNENCODABLE})

# The largest seq, epoch or clock taken as evidence: SQLite's INTEGER and PostgreSQL's bigint hold
# 2**63 - 1, and the next epoch (or seq) is one more than the highest known, so it must fit too.
MAX_COUNTER = 2**63 - 2
EVENT_COUNTERS = ("epoch", "clock", "expected_epoch")  # optional on an event line (None is absent)
EVENT_TEXTS = ("reason", "at", "actor", "correlation")  # optional text on an event line
MEMBER_COUNTERS = ("seq", "epoch")  # optional on a heartbeat (None is absent)

_ESCAPE = re.compile(rb"\\.", re.S)  # one backslash escape (non-overlapping, left to right)
_STRING = re.compile(rb'"[^"]*"')  # a string once its escapes are gone: linear, no backtracking
_OPEN = frozenset(b"[{")
# A surrogate can only come from a \\uD800-\\uDFFF escape (UTF-8 decoding refuses encoded ones): raw
# without one needs no walk. A pair of them is one character again once parsed, and passes.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
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
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError, MemoryError) as exc:
        msg = getattr(exc, "msg", type(exc).__name__)
        raise Untrusted(NOT_JSON, f"{what} is not JSON ({msg})") from None
    if may_hold_surrogate(raw) and not encodable(doc):
        raise Untrusted(UNENCODABLE, f"{what} holds text no UTF-8 can encode (a lone surrogate)")
    return doc


def may_hold_surrogate(raw: bytes) -> bool:
    """Whether JSON text `raw` has a surrogate escape: only then can its parsed value hold
    text that `encodable` refuses (a cheap look before the walk)."""
    return _SURROGATE_ESCAPE.search(raw) is not None


def encodable(value: Any) -> bool:
    """Whether every string in `value` (keys included, at any depth) encodes as UTF-8.
    Iterative: `value` came from a parser whose depth was bounded, but no recursion is needed."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True


def check_encodable(value: Any, what: str = "input") -> None:
    """`Untrusted(UNENCODABLE)` if any string in `value` cannot be encoded as UTF-8: for a
    document that reached the caller by another parser than `load_json` (a relay frame)."""
    if not encodable(value):
        raise Untrusted(UNENCODABLE, f"{what} holds text no UTF-8 can encode (a lone surrogate)")


def load_object(raw: bytes, limits: Limits, what: str = "input") -> dict[str, Any]:
    doc = load_json(raw, limits, what)
    if not isinstance(doc, dict):
        raise Untrusted(NOT_OBJECT, f"{what} is not a JSON object")
    return doc


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (RFC 8259), though Python's parser takes them."""
    raise ValueError(f"{name} is not a JSON value")


def is_counter(value: object) -> TypeGuard[int]:
    """A whole number from 0 to `MAX_COUNTER` (not a bool, not a float, not text)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNTER


def as_int(value: Any, default: D = 0, minimum: int | None = None) -> int | D:  # type: ignore[assignment]
    """The one guarded integer reader: `value` if it is a real int (never a bool,
    a float or text) and not below `minimum`, else `default`."""
    if isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum):
        return value
    return default


def as_float(value: Any) -> float | None:
    """`value` as a float if it is a real number (an int or a float, never a bool), else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def as_object(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object (a dict), else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """`value` if it is a JSON array (a list), else an empty one."""
    return value if isinstance(value, list) else []


def as_text(value: Any, default: str = "") -> str:
    """`value` if it is text, else `default`."""
    return value if isinstance(value, str) else default


def check_event(doc: dict[str, Any], what: str = "event line") -> None:
    """`Untrusted(BAD_FIELD)` naming the first field of an event record that has the
    wrong type or is out of range; the caller refuses that record alone."""
    seq = doc.get("seq")
    if not is_counter(seq) or seq < 1:
        raise Untrusted(
            BAD_FIELD, f"{what} has seq {_shown(seq)}, not a whole number from 1 to {MAX_COUNTER}"
        )
    if not isinstance(doc.get("kind"), str):
        raise Untrusted(BAD_FIELD, f"{what} has kind {_shown(doc.get('kind'))}, not text")
    for name in EVENT_COUNTERS:
        value = doc.get(name)
        if value is not None and not is_counter(value):
            raise Untrusted(
                BAD_FIELD, f"{what} has {name} {_shown(value)}, not a whole number from 0 to {MAX_COUNTER}"
            )
    for name in EVENT_TEXTS:
        value = doc.get(name)
        if value is not None and not isinstance(value, str):
            raise Untrusted(BAD_FIELD, f"{what} has {name} {_shown(value)}, not text")


def check_member(doc: dict[str, Any], what: str = "member record") -> None:
    """`Untrusted(BAD_FIELD)` if a heartbeat's `seq` or `epoch` is present but not a counter:
    an epoch of 2**70 would make the next election's epoch one no database can hold."""
    for name in MEMBER_COUNTERS:
        value = doc.get(name)
        if value is not None and not is_counter(value):
            raise Untrusted(
                BAD_FIELD, f"{what} has {name} {_shown(value)}, not a whole number from 0 to {MAX_COUNTER}"
            )


def _shown(value: Any) -> str:
    return repr(value)[:64]
