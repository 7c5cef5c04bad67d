"""`python -m stkrelay.worker --stk-beat NODE`: the agent's lease worker, without Celery's command line.

`celery -A stkrelay.celery worker ...` imports every subcommand of Celery's CLI
before it runs one: its REPL (click_repl, prompt_toolkit, wcwidth) and the AMQP
shell among them, ~11 MiB RSS and a second of start-up (measured, issue 41) that
the worker then holds for nothing. Here the same worker is built directly
(`app.Worker`, as that command does): solo pool, queue `lease`, prefetch 1, no
gossip, mingle or heartbeat, Celery's own log at WARNING, and the agent's one beat
on a thread of it (`--stk-beat`, `stkrelay.celery.ThreadedBeat`).

Nor does it load what kombu and Celery take only because it is installed: YAML and
msgpack serializers (tasks here are JSON, the only content accepted) and greenlet
(for eventlet and gevent pools; solo uses threads' own ids): ~2.3 MiB.
"""

from __future__ import annotations

import os
import sys

UNUSED = ("yaml", "msgpack", "greenlet")


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--stk-beat"]
    if len(args) != 1:
        print("usage: python -m stkrelay.worker [--stk-beat] NODE", file=sys.stderr)
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stkrelay.settings")
    # Celery's Django fixup runs Django's system checks as the worker starts, and ignores what
    # they say: they import the URLconf, so every view of the panel, the API and /metrics
    # (prometheus_client, argon2) with it. The one check of ours, the configuration's, is the
    # supervisor's to refuse a start on (`agent_root`). Skipped: ~4 MiB of its memory, and ~0.25 s
    # of its start at load 8 (issue 41, measured).
    os.environ.setdefault("CELERY_SKIP_CHECKS", "1")
    for unused in UNUSED:  # an import of it fails: the libraries then do without, as if absent
        sys.modules.setdefault(unused, None)  # type: ignore[arg-type]
    from stkrelay.celery import app

    worker = app.Worker(
        hostname=f"lease@{args[0]}",
        pool_cls="solo",
        queues=["lease"],
        loglevel="WARNING",
        prefetch_multiplier=1,
        without_gossip=True,
        without_mingle=True,
        without_heartbeat=True,
        stk_beat="--stk-beat" in argv,
    )
    worker.start()
    return int(worker.exitcode or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
