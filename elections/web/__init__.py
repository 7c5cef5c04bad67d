"""The web side of the agent: the admin panel (`panel/`), the JSON API, login
and tokens (`auth`), Prometheus metrics, health and leader lookup, and the SVG
timeline. Views read the local state and the database and call the steering
service for commands; they never touch the election's internals.

Vocabulary:

  site        one pool as the panel shows it (`panel.site.SiteState`)
  view        a pool's `pool.json` as this agent's worker wrote it, with its age
  stale       a view older than the worker's poll allows: shown, never trusted
  alarm       a stable code of what is wrong with a pool (the API's `alarms`)
  API token   a bearer token for /api/v1/ (`stkuser token NAME`)
"""
