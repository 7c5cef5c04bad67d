"""`LOG_FORMAT` and the rotation of the files the agent writes in `DATA_DIR`: the `log_keys` section
(`stkconfig.logs` is what the format makes of the log lines)."""

from __future__ import annotations

from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw

FORMATS = ("text", "json")


@dataclass(frozen=True)
class LogKeys:
    log_format: str = "text"
    log_max_bytes: int = 10 << 20
    log_backups: int = 5


def parse(raw: Raw, known: object, bad: Bad) -> LogKeys:
    """LOG_FORMAT (E021), LOG_MAX_BYTES and LOG_BACKUPS (E010/E011); a bad one at its default."""
    d = LogKeys()
    fmt = raw.text("LOG_FORMAT").lower()
    if fmt not in FORMATS:
        bad(
            "stkrelay.E021",
            "LOG_FORMAT",
            f"{raw.text('LOG_FORMAT')!r} is not a log format",
            "use text or json",
        )
        fmt = d.log_format
    size = raw.number("LOG_MAX_BYTES", bad)
    backups = raw.number("LOG_BACKUPS", bad)
    return LogKeys(fmt, size or d.log_max_bytes, backups or d.log_backups)
