"""Text from outside, made safe to print on a terminal (or in a log line).

A reason given through the API, a node name from the share, a message from the
relay may hold `\\x1b[...` escape sequences (recolour, retitle, move the cursor,
on some terminals write files), a carriage return that overwrites the line it
is on, a newline that forges the next line, or a bidi override that shows text
in another order than it is. `terminal_safe()` replaces every such character —
C0 controls (newline and tab included), DEL, C1 controls, the bidi embeddings,
overrides, isolates and marks, the line and paragraph separators, and lone
surrogates (undecodable bytes of a file name) — with a visible ``\\uXXXX``.

The escape is JSON's own, so a JSON document passed through it is still valid
JSON with the same value: the commands apply it to their JSON output too.
`relayctl`, `stkuser`, `relayclient` and the agents' log lines print nothing
from outside without it (`elections.ports.local.terminal.SafeOutput` for the
commands, `stkconfig.logs` for the logs). Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

# C0, DEL and C1; ALM; LRM, RLM; LS, PS; LRE..RLO; LRI..PDI; lone surrogates.
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def terminal_safe(text: Any) -> str:
    """`text` (anything, as `str()` shows it) with every control, bidi and surrogate
    character as a visible ``\\uXXXX``: one line, shown in the order it is stored."""
    return UNSAFE.sub(_escape, text if isinstance(text, str) else str(text))
