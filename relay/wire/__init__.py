"""Relay wire protocol v1/1.1 (docs/design.md §8), sans-I/O: bytes in, events out.

Vocabulary:

  frame       4-byte big-endian length + one JSON object (`framing`)
  connection  one end's state machine over frames: `ServerConnection`
              (server_connection), `ClientConnection` (client_connection)
  event       what a connection hands its transport (`events`: Registered,
              Message, RawData, ProtocolError, ...)
  token       the relay's site token; a station's credential is derived from
              the pool key (`stkhost.pool_keys.station_credential`)
  legacy      the old stations' register (`legacy`, RELAY_LEGACY = 1)
  mux         many byte streams over one tunnel connection (`mux`, docs/design.md §14)
  lease MAC   the cloud's check of a presented lease (`lease_mac`)

No sockets, asyncio, clock reads or Django here (import-linter).
"""
