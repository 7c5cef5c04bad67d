"""The warm standby's wait: until this agent leads and start_relay ran for its epoch."""

from __future__ import annotations

import time

from elections.ports.local.localstate import (
    LEADERSHIP_NAME,
    RELAY_WANTED_NAME,
    LocalState,
)
from relay.runner.gate import LeadershipGate
from stkconfig.model import Config
from stkhost.dirwatch import DirWatch

STANDBY_POLL = 0.05  # without inotify
STANDBY_FALLBACK = 1.0  # with it: a look this often even if no change was announced


def await_leadership(stk: Config) -> int:
    """Look at the leadership state and the relay marker whenever the worker
    replaces one of them (inotify on the data directory), at least every
    STANDBY_FALLBACK, or every STANDBY_POLL where inotify is not to be had. The
    imports are done, so the listeners are up within ~0.1 s of the action, and
    an idle standby costs no wakeups."""
    local = LocalState(stk.data_dir)
    with DirWatch(stk.data_dir, (LEADERSHIP_NAME, RELAY_WANTED_NAME)) as changes:
        every = STANDBY_FALLBACK if changes.watching else STANDBY_POLL
        while True:
            epoch = local.leadership().held_epoch(time.monotonic())
            if (
                epoch is not None and local.relay_wanted() == epoch
                and LeadershipGate(stk.data_dir, epoch).why_not() is None
            ):  # fmt: skip
                return epoch
            changes.wait(every)
