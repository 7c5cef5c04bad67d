"""The operator's side of the elections app: its management commands and what they print.

Vocabulary:

  view      this agent's `pool.json`, with its age and source (`pool_views`)
  stale     a view older than HEARTBEAT_TTL: refused (exit 5) unless `--stale-ok`
  check     one line of `relayctl doctor`: name, ok, detail (`doctor_checks`)
"""
