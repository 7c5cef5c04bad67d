"""The agent's Celery app: broker is this agent's own Redis, never a shared one."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stkrelay.settings")

app = Celery("stkrelay")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["elections"])
