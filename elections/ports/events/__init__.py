"""The pool's event log (docs/design.md §6, §5.4): its port, its records over any backend, and
its files on a share, segmented and read from a cursor.

Vocabulary:

  EventStreams  the event-log operations of the backend port (`event_streams`)
  event log     the pool's signed event lines, one writer per node (`event_records`, `eventlog`)
  tail          reading a folder's event files on from a cursor (`eventtail`)
  segment       one file of a node's event lines; compaction drops old ones (`segments`)
"""
