"""The relay: what a leader serves and how clients reach it (docs/design.md §8, §9, §14, §16).

Packages, each with one side of the conversation:

  wire/    the protocol as bytes and events, sans-I/O (both ends, the tunnel's mux)
  server/  a leader's relay: listeners, connections, routing, caps, the fencing proxy
  client/  the client library: discovery, one session, following the leader
  web/     the WebSocket routes (Channels), bridges into the server
  cloud/   the cloud rendezvous relay (runcloud), a separate program

Vocabulary (one name, one meaning across them):

  token      the relay's site token (RELAY_TOKEN); the pool's key is `pool_key`
  station    a client's registered name; its credential is derived from the pool key
  epoch      the leader's epoch, on every session: a stale one is refused (fencing)
  leader     the member whose relay serves now; a client follows it (`client.follow`)
  passthrough  the raw byte port beside the JSON one (RELAY_PORT + 1)

`runner/` composes the server for the agent (`python -m stkrelay.child relay.runner`). The
client never imports the server; wire, server and client never import Django
(import-linter contracts in pyproject.toml).
"""
