"""The beacons between members (docs/design.md §13): the asyncio transport around the pure core,
its replay memory, the supervisor's liveness port, and command nudges.

Vocabulary:

  beacons    signed UDP datagrams between members, and the liveness watch (`beacons`)
  seqs       the board's replay memory across a restart (`beacon_seqs`)
  liveness   the supervisor's TCP port a follower holds open to the leader (`liveness_port`)
  nudge      one signed datagram telling members a command was written (`nudge`)
"""
