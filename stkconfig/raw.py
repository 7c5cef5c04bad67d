"""`Raw`: what every section of the loader reads, and the one shape of a section's parser.

A section (`stkconfig.timing`, `stkconfig.ownership`...) is one module with one frozen
dataclass, its fields named as `Config`'s (`lease_ttl`), and one parser:

    def parse(raw: Raw, known: <what it reads of the sections before it>, bad: Bad) -> <Section>

`raw` holds the raw `[stk]` values (the table's defaults, the file, `STK_<KEY>`), the
`[pool:<KMSN>]` sections, the environment and whether the disk is looked at; `known` is the
loader's draft of the sections parsed before (each section's module says what it reads of them
with a Protocol); `bad` says each bad value (`stkconfig.bad`). A parser never raises for a
bad value: it says it and puts the default in its place. The loader (`stkrelay.config.load`)
copies each section's fields into the `Config` (`stkconfig.model.take`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stkconfig.bad import Bad
from stkconfig.keys import BY_NAME

KINDS: dict[str, type] = {"int": int, "float": float}
FALSE_WORDS = ("0", "no", "false", "off")


@dataclass(frozen=True)
class Raw:
    values: Mapping[str, str]  # every [stk] key of the table (and the leader actions'), as text
    env: Mapping[str, str] = field(default_factory=dict)
    check_dirs: bool = True  # look at LEASE_DIR, DATA_DIR, TLS files... on disk
    pools: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # [pool:<KMSN>] sections as given

    def text(self, key: str) -> str:
        return self.values.get(key, "")

    def flag(self, key: str, default: bool) -> bool:
        """An ini boolean: 0/no/false/off are false, any other text true, empty the default."""
        text = self.text(key)
        return default if not text else text.lower() not in FALSE_WORDS

    def number(
        self, key: str, bad: Bad, kind: type | None = None, low: float | None = None,
        high: float | None = None,
    ) -> Any:  # fmt: skip
        """The key's value as a number within its range (the table's, unless given), else None
        and E010 (not a number) or E011 (out of range)."""
        row = BY_NAME[key]
        kind = kind or KINDS[row.kind]
        if low is None or high is None:
            assert row.range is not None, key
            low, high = row.range
        text = self.text(key)
        try:
            value = kind(text)
        except ValueError:
            bad("stkrelay.E010", key, f"{text!r} is not a number", f"set {key} to a number")
            return None
        if not low <= value <= high:
            bad("stkrelay.E011", key, f"{value} is out of range", f"use {low:g}..{high:g}")
            return None
        return value
