"""Celery tasks of the lease queue. Safe when late or duplicated: each carries
`expires` (set by the beat schedule), and every write is compare-and-set, so a
late renewal can never resurrect a lost lease."""

from celery import shared_task

from elections.runtime.agent import agent


@shared_task(name="elections.renew", ignore_result=True)
def renew() -> str:
    return str(agent().tick(renewing=True))


@shared_task(name="elections.poll", ignore_result=True)
def poll() -> str:
    return str(agent().tick(renewing=False))


@shared_task(name="elections.watch", ignore_result=True)
def watch() -> str:
    decision = agent().watch()
    return str(decision) if decision is not None else "no change"
