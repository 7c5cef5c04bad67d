"""Where a command-line tool takes a secret from: a file, stdin, or the environment — never argv.

Anything on a command line is readable by every local user (`ps`, `/proc/PID/cmdline`)
for as long as the process runs, and stays in shell history. So `stkuser`,
`relayclient` and the bare contender read passwords and tokens from a file
(`--password-file PATH`, `--token-file PATH`; `-` is stdin) or from an `STK_*`
environment variable; the old flags that took the secret itself are still
parsed, only to refuse them with `argv_refusal()` (one clear line, exit 2),
so a script that still passes one fails loudly instead of leaking.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

MAX_SECRET = 4096  # bytes read from a secret file: a token, a password, never a document


class SecretUnreadable(ValueError):
    """The file or stdin named for a secret cannot be read, or holds none; the message says which."""


def read_secret(path: str, flag: str, stdin: TextIO | None = None) -> str:
    """The first line of file `path` (`-`: stdin), without its line end; `SecretUnreadable`
    if it cannot be read or is empty. `flag` names the option in the message."""
    try:
        if path == "-":
            line = (stdin or sys.stdin).readline(MAX_SECRET)
        else:
            with open(path, encoding="utf-8") as fh:
                line = fh.readline(MAX_SECRET)
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise SecretUnreadable(f"cannot read {flag} {path}: {why}") from None
    secret = line.rstrip("\r\n")
    if not secret.strip():
        where = "stdin" if path == "-" else path
        raise SecretUnreadable(f"{flag} {where} is empty")
    return secret


def from_environment(name: str) -> str:
    """The secret in environment variable `name` (surrounding blanks dropped), '' if unset."""
    return os.environ.get(name, "").strip()


def argv_refusal(flag: str, *instead: str) -> str:
    """The line that refuses a secret given on the command line, naming what to use instead."""
    return (
        f"{flag} is no longer accepted: a secret on the command line is visible to every local "
        f"user (ps) and stays in shell history; use {' or '.join(instead)}"
    )
