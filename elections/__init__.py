"""The elections app: one pool's members elect a leader through a signed lease (docs/design.md §1–7).

Vocabulary (docs/design.md §2):

  pool          the members of one KMSN that elect among themselves
  member, node  one agent in a pool; `node` is its stable id
  lease         the signed record naming the leader, its address and its epoch
  epoch         the election's generation: +1 on every change of leader, never down
  store         where the pool's records live: a share, SMB or etcd (`ports`)
  cycle         one read, one decision, one act of a member's elector (`runtime`)
  action        what winning or losing an epoch does, run by `executors`
  steering      the one path of every operator command (`steering`)

Layers (import-linter, pyproject.toml): entry points > web > steering > runtime > executors >
models > audit > ports > core.
"""
