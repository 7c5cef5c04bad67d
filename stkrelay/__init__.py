"""The Django project. The Celery app is `stkrelay.celery` (`celery -A stkrelay.celery`): it is
not imported here, so the processes that send no task (web, relay, supervisor) never load Celery.

Vocabulary:

  settings   Django's, built from `stk.ini` (`settings`, `config`; `settings.STK` is the `Config`)
  check      a configuration problem with a stable id and a hint (`checks`)
  child      a Django-free process of `runagent` (`child`: the relay, the entry)
  stkrelay   the installed command (`cli`, `python -m stkrelay`)
"""
