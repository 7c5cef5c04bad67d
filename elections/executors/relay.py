"""The local relay executor: `start_relay` / `stop_relay`.

It does not run the relay itself; it tells whoever does: it writes (or
removes) `DATA_DIR/relay.wanted`, a JSON marker `{"epoch": N}` that the warm
standby relay (`runrelay --standby`) watches beside `leadership.json`.
"""

from __future__ import annotations

import os
from pathlib import Path

from elections.core.actions import START_RELAY, STOP_RELAY, Action
from elections.executors.base import CommandFailed, Outcome, Recheck, applied, no_recheck
from elections.ports.local.localstate import LocalState


def relay_wanted(data_dir: str | os.PathLike[str]) -> int | None:
    """The epoch the relay is wanted for, or None (no marker, or unreadable)."""
    return LocalState(data_dir).relay_wanted()


class RelayExecutor:
    name = "relay"
    verbs = frozenset({START_RELAY, STOP_RELAY})

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)

    def apply(self, action: Action, recheck: Recheck = no_recheck) -> Outcome:
        return applied(action, self._mark(action))

    def _mark(self, action: Action) -> str:
        local = LocalState(self.data_dir)
        path = local.relay_wanted_path
        try:
            if action.verb == START_RELAY:
                local.want_relay(action.epoch)
                return f"relay wanted for epoch {action.epoch} ({path})"
            wanted = local.relay_wanted()
            if wanted is not None and wanted > action.epoch:
                return f"relay marker is for epoch {wanted}, newer than {action.epoch}: left alone"
            local.unwant_relay()
            return f"relay no longer wanted ({path} removed)"
        except OSError as exc:
            raise CommandFailed(f"cannot update {path}: {exc.strerror or exc}") from exc
