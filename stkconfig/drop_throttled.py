"""The console handler's filter of a login flood's lines (`elections.web.throttle` logs one summary
instead of Django's "Too Many Requests" per refusal).

Here, not beside the throttle: every process's logging configuration names it
(`stkconfig.logs`), the supervisor's and the relay's too, and a filter that lived in
`elections.web.throttle` loaded `django.conf`, asgiref and asyncio into those Django-free
processes with it (~118 ms of their start, issue 41).
"""

from __future__ import annotations

import logging


class DropThrottled(logging.Filter):
    """Drop django.request's line for each 429 (the throttle logs a summary instead)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "django.request" and getattr(record, "status_code", None) == 429)
