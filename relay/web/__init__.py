"""The relay's WebSocket routes (Channels): `/ws/relay/` and `/ws/stream/` bridge into the
leader's relay (`ws`), with a bound on what the web process holds per socket (`ws_flow`).

Vocabulary:

  bridge    one WebSocket, bridged into the leader's relay (`ws`)
  flow      what the web process holds for one socket, bounded (`ws_flow`)
"""
