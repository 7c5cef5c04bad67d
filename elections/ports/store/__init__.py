"""The pool's store (docs/design.md §5): the backend port, the one record layer over it, the
`LeaseStore` the elector holds, and `stores`, the one place that opens them.

Vocabulary:

  Backend        bytes under keys with a revision: get, list, cas, claim, wait_change (`backend`)
  PoolStore      the one record layer over any backend: signs, verifies, refuses (`records`)
  LeaseStore     the port the elector holds (`store`); opened only by `stores`
  MemoryBackend  the backend port on a dict, for in-process tests (`memory_backend`)
  wait_change    wait until a key may have changed; a share's is `wait_folder_change`
"""
