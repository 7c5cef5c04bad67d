"""The agent's Celery app: broker is this agent's own Redis, never a shared one."""

import os
from typing import Any

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stkrelay.settings")

app = Celery("stkrelay")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["elections"])


@after_setup_logger.connect
@after_setup_task_logger.connect
def _json_logs(logger: Any = None, **kwargs: Any) -> None:
    """LOG_FORMAT = json: Celery's own handlers (worker, beat) write JSON lines too."""
    from django.conf import settings

    from stkrelay.logs import use_json

    stk = settings.STK
    if stk.log_format == "json" and logger is not None:
        use_json(logger, stk.node)
