"""Ports and their adapters (DESIGN.md §3, layer 2).

The small interfaces the runtime talks through, each with its real
implementation: `Clock` (monotonic + wall, injectable), `LeaseStore` (the
file backend on the share), the pool's event log (`events/<node>.jsonl`),
this agent's data directory (`localstate`), and the host itself (atomic
writes, process liveness). Nothing here decides anything.
"""
