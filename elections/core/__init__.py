"""The pure core of the election (DESIGN.md §3, layer 1).

Lease records and their signatures, the election decision, eligibility, the
successor rule, the fold of operator commands, action plans and the
derivation of failovers from history. No Django, no I/O, no sockets, no clock
reads: time comes in as an argument, and every function is tested by table.
"""
