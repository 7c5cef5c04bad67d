"""Old stations on the built-in relay (issue 19; docs/relay.md, "Legacy stations"): the `legacy`
section.

- `RELAY_LEGACY` (0|1, default 0): the built-in relay also accepts old stations
  (``relay_client.prg`` framing, the old MAGIC, the site token in clear;
  `relay.wire.legacy`).
- `RELAY_LEGACY_MAGIC`: the old relay's MAGIC, as its ``relay_server.py`` has
  it. Required while `RELAY_LEGACY = 1` (`stkrelay.E080`): our documents do
  not hold it, so there is no default to guess wrong. 1..64 printable ASCII
  characters, not ``STKRELAY/1`` (`stkrelay.E081`).
- `RELAY_LEGACY_WAIT` (seconds, default 0.3, 0..2): how long the relay holds
  its hello for a client that may speak first (`stkrelay.E082`). 0 greets at
  once (an old station then gets a frame it must skip).

`RELAY_LEGACY = 1` with `RELAY_KIND = exec` is checked where `RELAY_KIND` is. The old agent's
file itself is read by `stkrelay.config_legacy`.
"""

from __future__ import annotations

from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw

DEFAULT_WAIT = 0.3
MAX_WAIT = 2.0
MAX_MAGIC = 64
MODERN_MAGIC = "STKRELAY/1"


@dataclass(frozen=True)
class Legacy:
    relay_legacy: bool = False  # old stations on the built-in relay (relay.wire.legacy)
    relay_legacy_magic: str = ""
    relay_legacy_wait: float = DEFAULT_WAIT


def parse(raw: Raw, known: object, bad: Bad) -> Legacy:
    """`RELAY_LEGACY`, `RELAY_LEGACY_MAGIC`, `RELAY_LEGACY_WAIT`, reporting E080–E082."""
    values = raw.values
    on = raw.flag("RELAY_LEGACY", False)
    magic = values.get("RELAY_LEGACY_MAGIC", "")
    text = values.get("RELAY_LEGACY_WAIT", "") or str(DEFAULT_WAIT)
    try:
        wait = float(text)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_WAIT:
        bad("stkrelay.E082", "RELAY_LEGACY_WAIT", f"{text!r} is not 0..{MAX_WAIT:g} seconds",
            f"the seconds the relay holds its hello for an old station, e.g. {DEFAULT_WAIT}")  # fmt: skip
        wait = DEFAULT_WAIT
    if magic and (len(magic) > MAX_MAGIC or not magic.isascii() or not magic.isprintable()
                  or magic == MODERN_MAGIC):  # fmt: skip
        bad("stkrelay.E081", "RELAY_LEGACY_MAGIC", f"{magic[:80]!r} cannot be the old relay's MAGIC",
            f"1..{MAX_MAGIC} printable ASCII characters, not {MODERN_MAGIC}: copy MAGIC from the "
            "site's relay_server.py")  # fmt: skip
        return Legacy(on, "", wait)
    if on and not magic:
        bad("stkrelay.E080", "RELAY_LEGACY_MAGIC", "is not set while RELAY_LEGACY = 1",
            "copy MAGIC from the site's relay_server.py (our documents do not hold it)")  # fmt: skip
    return Legacy(on, magic, wait)
