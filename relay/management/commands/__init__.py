"""The relay app's commands: `relayclient`, `runrelay` and `runcloud`.

Vocabulary:

  relayclient   an operator's relay client: listen, send, ping (docs/design.md §9)
  runrelay      this agent's relay listeners, while it leads
  runcloud      the cloud rendezvous relay, from cloud.ini (docs/design.md §14)
"""
