"""A dataclass as a document one level deep: the local files' writer's `asdict` without its deep copy.

`dataclasses.asdict` copies every nested dict, list and tuple of what it is given,
field by field. The local state files (pool.json at every cycle, leadership.json at
every move of the leader's gate, relay.json every second) are dumped to JSON at once
and never changed below their top level: their nested values can be the object's own.
In the lease worker's per-thread profile it was a third of its main thread's CPU and
a quarter of the leader's publications (issue 41).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any


def shallow_doc(obj: Any) -> dict[str, Any]:
    """`obj`'s fields by name, their values as they are (a nested dataclass is left to the caller)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}
