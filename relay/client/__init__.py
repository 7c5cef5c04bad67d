"""The relay client library (docs/design.md §9): find the leader, register, stay, follow.

Vocabulary:

  RelayClient   the caller's object (`relay_client`); its read-only view (`state`)
  discovery     where the leader's relay is: signed lease, agents' API, beacons
                (`discovery`, `beacon_discovery`)
  session       one connection: connect, register, pump, keepalives (`session`)
  follow        how a client finds the leader again after `leader_changed` (`follow`)
  outbox/inbox  at-least-once sending with confirmations; a bounded inbox dropping
                duplicates (`outbox`, `inbox`)
  events        what the client hands its caller (`events`)

Never imports the server, the cloud or Django.
"""
