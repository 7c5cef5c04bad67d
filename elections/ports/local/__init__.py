"""This agent's own host: the files of its data directory that its processes share, its web
certificate, the gate it looks at, its Redis, and what its commands print.

Vocabulary:

  LocalState  this agent's data directory, shared by its processes (`localstate`)
  pool view   `pool.json`: an agent's view of its pool and members (`pool_view`)
  web cert    the certificate of its panel and API (`webcert`)
  gate        a look at `GATE_FILE` or `GATE_CMD` (`gate`)
"""
