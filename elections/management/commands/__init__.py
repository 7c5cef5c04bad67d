"""The elections app's commands: `relayctl` (see and steer the pool), `runagent`, `stkuser`.

Vocabulary:

  command   an operator command (drain, promote, pause...): through `elections.steering`
  exit      relayctl's: 0 ok, 1 refused or failed, 2 usage, 3 unreachable, 4 stale epoch,
            5 stale view
"""
