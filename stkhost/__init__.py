"""What every app of the project uses of its host, below them all: its clocks (`clock`), the
OS seam, retries (`retry`), HTTPS to pinned fingerprints (`pinned_https`, `fingerprints`) and
where a tool reads a secret (`secret_source`). It imports nothing of the project: the election
(`elections`), the relay (`relay`, whose client library imports no port of the election) and
the Django project (`stkrelay`) all stand on it, as on `stkconfig` for their configuration.

The OS seam: every call that only Linux (or POSIX) answers lives in this package,
behind names that say what they do. `tests/test_architecture.py` fails if any other
module calls `prctl`, `os.killpg`, `os.setsid`, `preexec_fn`, `start_new_session`,
`os.pipe2`, inotify or `reuse_port`.

Vocabulary:

  Clock   monotonic, wall and boot time, injected (`clock`)
  seam    a name that says what a call does (`write_atomic`, `pid_alive`); what it costs on
          another OS is written below
  Backoff the one retry helper, with an injected sleep (`retry`)
  pin     a certificate's SHA-256 fingerprint a client trusts (`fingerprints`, `pinned_https`)

- `files`: `write_atomic` (temp file + `os.replace`), `publish_exclusive` (temp file +
  `link()` or `renameat2(RENAME_NOREPLACE)`), `unlink_quietly`.
- `processes`: `spawn_options` (a child in a session of its own, and/or killed when
  its parent dies), `kill_group`, `pid_alive`, `wake_pipe`.
- `dirwatch`: `DirWatch`, a folder watched for replaced files (inotify), with a
  timeout as the fallback.
- `locks`: `exclusive`, one holder at a time among this host's processes
  (`flock` on a local file), taken within a deadline or not at all; `held_for_child`
  and `wait_unheld`, a folder locked for as long as a child runs, and the wait for it.
- `pem_pair`: `check_pair`, an operator's PEM certificate and key checked as a TLS
  server loads them, and `read_pem`, a PEM file read within its bound.
- `pool_keys`: the keys a site's pool key derives one way (a station's credential, the
  cloud's lease key), hex HMAC-SHA256 (`hex_hmac`).
- `sockets`: `open_shared_udp`, a UDP endpoint several processes of this host may
  bind on one port (`SO_REUSEPORT`; beacons, discovery).

What a native Windows agent needs here (a plan, not code that was run):

- `spawn_options`: a Job Object with `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`, the
  supervisor holding the job's handle: its children die when it does, the role of
  `PR_SET_PDEATHSIG` and of the process group here; `CREATE_NEW_PROCESS_GROUP` for
  a child's own console-signal group.
- `kill_group`: `TerminateJobObject` (SIGKILL) or `GenerateConsoleCtrlEvent(
  CTRL_BREAK_EVENT)` to the group (SIGTERM's polite stop); there is no SIGSTOP.
- `pid_alive`: `OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION)` and
  `GetExitCodeProcess` (`STILL_ACTIVE`); Windows has no signal 0.
- `wake_pipe`: a socket pair (`socket.socketpair()`): `select` on Windows takes
  sockets only, and SIGCHLD does not exist (a thread waits on the children's
  handles with `WaitForMultipleObjects` and writes to the pair).
- `DirWatch`: `ReadDirectoryChangesW` on the data folder (`FILE_NOTIFY_CHANGE_
  LAST_WRITE | FILE_NAME`), or the timeout alone.
- `open_shared_udp`: no `SO_REUSEPORT`; `SO_EXCLUSIVEADDRUSE` off and one receiver
  per host and port (two agents on one Windows host need two ports), and
  broadcast receive needs the socket bound to the wildcard address.
- `exclusive`: `LockFileEx(LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY)`,
  polled the same way.
- `files`: `os.replace` fails while a reader holds the target open (the retry is
  already there); `publish_exclusive` becomes `MoveFileExW` without
  `MOVEFILE_REPLACE_EXISTING`.
- Signals: `asyncio`'s `add_signal_handler` does not exist on Windows' proactor
  loop; the runtime's stop becomes a console control handler or a service stop.
"""
