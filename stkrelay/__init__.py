"""The Django project. The Celery app is `stkrelay.celery` (`celery -A stkrelay.celery`): it is
not imported here, so the processes that send no task (web, relay, supervisor) never load Celery."""
