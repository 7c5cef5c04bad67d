"""The pure core of the election (docs/design.md §3, layer 1).

Lease records and their signatures, the election decision, eligibility, the
successor rule, the fold of operator commands, action plans and the
derivation of failovers from history. No Django, no I/O, no sockets, no clock
reads: time comes in as an argument, and every function is tested by table.

Vocabulary:

  LeaseRecord    the lease's fields; `LeaseRead` a read of it with its status (`lease`)
  renew_seq      the leader's count of renewals within one epoch
  Memory         what a node remembers of the leases it has seen (`lease_memory.track`)
  Observation    everything one cycle looked at; `Decision` what to do, with its `Verdict`
  cause          why a follower contends (first, expired, released, handoff, gone, silent...)
  eligibility    whether a member may lead, with its reasons (`eligibility`)
  command        an operator's drain, promote, pause...: folded by its clock (`commands`)
  ActionPlan     what taking or losing an epoch does (`actions`)
  serving right  a leader's right to serve, acked by a majority's beacons (`serving`)
  refusal        a record refused as evidence, counted and shown (`evidence`, `untrusted`)
"""
