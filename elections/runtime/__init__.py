"""The agent at run time (docs/design.md §3–4, the shell around the core).

`elector` gathers one observation per cycle, asks `core.decide` and acts
through the store; `policy` turns the pool's commands and views into that
observation's eligibility, pause, handoff and successor; `health` runs the
configured checks on their own schedule; `projection` puts the pool's events
in this agent's database; `supervisor` runs the agent's processes. `agent`
wires them together from settings and is imported only by entry points (the
Celery tasks and the management commands).

Vocabulary:

  Elector       one node's election loop and its acts on the store
  cycle         one `attempt` (read once, decide once, act once), retried around it
  Attempt       what one attempt came to, and the verdict whose act lost a race
  duty          what the agent does on `on_elected` / `on_demoted` (`agent`)
  glance        the cheap look between polls, every LEASE_WATCH (`agent`)
  quiet         a follower reading less while the leader's beacons vouch for the lease
  watched pool  a `[pool:<KMSN>]` this agent shows and never contends in (`watch`)
  ownership     where the leader's addresses really are, looked at and repaired (`ownership`)
"""
