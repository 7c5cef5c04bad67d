"""Ports and their adapters (docs/design.md §3, layer 2).

The small interfaces the runtime talks through, each with its real
implementation. Nothing here decides anything.

Vocabulary:

  Backend      bytes under keys with a revision: get, list, cas, claim, wait_change (`backend`)
  PoolStore    the one record layer over any backend: signs, verifies, refuses (`records`)
  LeaseStore   the port the elector holds (`store`); opened only by `stores`
  Share        a folder of a file server: local, mounted or SMB (`share`, `smbshare`)
  wait_change  wait until a key may have changed; a share's is `wait_folder_change`
  event log    the pool's signed event lines, one writer per node (`eventlog`, `eventtail`)
  LocalState   this agent's data directory, shared by its processes (`localstate`)
  beacons      signed UDP datagrams between members, and the liveness watch (`beacons`)
  Clock        monotonic, wall and boot time, injected (`clock`)
  host         every call only Linux answers (`host/`)
"""
