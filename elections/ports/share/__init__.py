"""The pool on a file server's folder (docs/design.md §5.1, §5.3): the `Share` seam, local,
mounted or over SMB2/3 without a mount, the backend port on it, and its acquisition lock.

Vocabulary:

  Share         the few file operations a pool's records need, on a folder (`share`)
  ShareBackend  the backend port on a share's folder (`share_backend`)
  SmbShare      the `Share` over SMB2/3 (`smbshare`; its terms `smbterms`, CHANGE_NOTIFY `smbnotify`)
  lock          the share's acquisition lock, `relay_leader.lock` (`filelock`)
"""
