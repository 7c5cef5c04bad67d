"""What the elector says of a lease it read that is no evidence: a forged, a
damaged or a replayed lease is logged (once per cause, by the elector) and a
replay is counted as a refusal. Pure: it looks at the read and the elector's
memory only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from elections.core.evidence import DETAIL_CHARS, printable
from elections.core.lease import LeaseRead
from elections.core.lease_memory import Memory, replayed


def read_trouble(read: LeaseRead, memory: Memory, where: Callable[[], str]) -> tuple[str, int, str | None]:
    """(message, log level, the replay's detail if it is one) for a read that is no
    evidence (`where()` names the store, asked only then); ("", 0, None) for one that is."""
    quoted = printable(read.detail, DETAIL_CHARS)  # it may quote the record's own text
    if read.status == "forged":
        return f"SECURITY: ignoring forged lease in {where()}: {quoted}", logging.ERROR, None
    if read.status == "corrupt":
        return f"ignoring damaged lease in {where()}: {quoted}", logging.WARNING, None
    if replayed(memory, read) and read.record is not None:
        detail = printable(f"{read.record.describe()} is older than seen {memory.seen_key}", DETAIL_CHARS)
        return f"SECURITY: ignoring replayed lease in {where()}: {detail}", logging.ERROR, detail
    return "", 0, None
