"""The agent's log lines: `LOG_FORMAT = text` (the default) or `json`.

In `json` every line an agent writes on its output is one JSON object, for
journald or Loki: `{"time", "level", "node", "kmsn", "component", "logger", "message",
"event"?, "fields"?, "exc"?}`. The children log through `JsonFormatter` (Django's
LOGGING for web and relay, Celery's `after_setup_logger` for worker and beat);
`runagent`'s supervisor passes their JSON lines on, adds `node`/`kmsn`/`component`
where missing, and wraps anything else a child prints (a banner, a traceback
line written to stderr) with `as_json_line`, so nothing reaches the output
that is not one object.

Nothing from outside reaches the output raw: in `text` the message of each
record (`SafeTextFormatter`), in `json` the whole line, passes through
`elections.core.terminal.terminal_safe` (a JSON line stays the same JSON), so a
planted file name or a reason given through the API cannot send escape
sequences to the terminal or journald, nor forge a line.

`component` is the child's name (`web`, `worker`, `beat`, `relay`, `agent`), from
`STK_COMPONENT`, which the supervisor sets; a command run by hand says `cli`.
`event` and `fields` come from `log.info("...", extra={"event": "elected", ...})`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any

from elections.core.terminal import terminal_safe

FORMATS = ("text", "json")
MAX_LINE = 64 * 1024  # a child's line longer than this is cut before wrapping

# Attributes every LogRecord has; anything else was given with `extra=` and is a field.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
# A level as log formats write it: "WARNING/MainProcess]", "ERROR:root:", "[INFO]" (not any mention).
_LEVEL_WORDS = re.compile(r"\b(CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG)(?=[/:\]])")


def _now_iso(t: float | None = None) -> str:
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class SafeTextFormatter(logging.Formatter):
    """The `text` format, with each record's message escaped (`terminal_safe`); a
    traceback keeps its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = terminal_safe(record.message)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def __init__(self, node: str = "", component: str | None = None, kmsn: str = "") -> None:
        super().__init__()
        self.node = node
        self.kmsn = kmsn  # the site (pool) this agent serves: one log store holds many sites
        self.component = component  # None: $STK_COMPONENT when the record is written, else `cli`

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _now_iso(record.created),
            "level": record.levelname.lower(),
            "node": self.node,
            "kmsn": self.kmsn,
            "component": self.component or os.environ.get("STK_COMPONENT", "cli"),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
        if "event" in fields:
            doc["event"] = fields.pop("event")
        if fields:
            doc["fields"] = fields
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return terminal_safe(json.dumps(doc, default=str, ensure_ascii=False))


def logging_config(fmt: str, node: str, component: str | None = None, kmsn: str = "") -> dict[str, Any]:
    """Django's LOGGING for this process. `text` is the agent's historical config."""
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {"()": SafeTextFormatter, "format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
        },
        # A login flood's 429s are summarised by the throttle, not logged one by one; refused
        # bodies are one line each from elections.web.body_limit, not Django's (and tracebacks).
        "filters": {
            "drop_throttled": {"()": "stkconfig.drop_throttled.DropThrottled"},
            "quiet_refusals": {"()": "elections.web.body_limit.QuietRefusals"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["drop_throttled"]}
        },
        "loggers": {
            "stkrelay": {"handlers": ["console"], "level": "INFO", "propagate": False},
            "django": {"handlers": ["console"], "level": "WARNING"},
            # Logger-level: these records then reach no handler, Django's or Daphne's root one.
            "django.request": {"filters": ["quiet_refusals"]},
            "django.security.RequestDataTooBig": {"filters": ["quiet_refusals"]},
        },
    }
    if fmt == "json":
        config["formatters"]["json"] = {
            "()": JsonFormatter,
            "node": node,
            "component": component,
            "kmsn": kmsn,
        }
        config["handlers"]["console"]["formatter"] = "json"
        # Libraries' loggers (daphne, twisted, channels...) go through the root logger, in JSON too.
        config["root"] = {"handlers": ["console"], "level": "INFO"}
        config["loggers"]["django"]["propagate"] = False
    return config


def use_json(logger: logging.Logger, node: str, component: str | None = None, kmsn: str = "") -> None:
    """Give every handler of `logger` the JSON formatter (Celery's own loggers)."""
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter(node, component, kmsn))


def as_json_line(line: str, node: str, component: str, now: float | None = None, kmsn: str = "") -> str:
    """A child's output line as one JSON object: its own JSON object (with `node`,
    `kmsn` and `component` filled in when missing), else the text wrapped as `message`."""
    line = line.rstrip("\r\n")[:MAX_LINE]
    doc: Any = None
    if line.startswith("{"):
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):
            doc = None
    if not isinstance(doc, dict):
        found = _LEVEL_WORDS.search(line[:200])
        level = found.group(1).lower() if found else "info"
        level = {"warn": "warning"}.get(level, level)
        doc = {"time": _now_iso(now), "level": level, "message": line}
    doc.setdefault("node", node)
    doc.setdefault("kmsn", kmsn)
    doc.setdefault("component", component)
    return terminal_safe(json.dumps(doc, default=str, ensure_ascii=False))
