"""The agent at run time (DESIGN.md §3–4, the shell around the core).

`elector` gathers one observation per cycle, asks `core.decide` and acts
through the store; `policy` turns the pool's commands and views into that
observation's eligibility, pause, handoff and successor; `health` runs the
configured checks on their own schedule; `projection` puts the pool's events
in this agent's database; `supervisor` runs the agent's processes. `agent`
wires them together from settings and is imported only by entry points (the
Celery tasks and the management commands).
"""
