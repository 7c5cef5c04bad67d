"""How a check says a value is wrong: `Bad`, the one callback every check of the loader takes,
and `Number`, the loader's reader of a numeric key against the key table.

`bad(id, key, message, hint)` records one `stkconfig.model.Problem` (`stkrelay.E0xx`, the key,
what is wrong, the fix); a check never raises for a bad value. `number(key[, kind, low, high])`
is the key's value as the table's kind within the table's range (or the given ones), else None
with `stkrelay.E010` (not a number) or `stkrelay.E011` (out of range) said through `bad`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Bad = Callable[[str, str, str, str], None]  # (id, key, what is wrong, the fix)
Number = Callable[..., Any]  # number(key[, kind, low, high]) -> int | float | None
