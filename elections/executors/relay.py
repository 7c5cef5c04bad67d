"""The local relay executor: `start_relay` / `stop_relay`.

It does not run the relay itself; it tells whoever does. By default it writes
(or removes) `DATA_DIR/relay.wanted`, a JSON marker `{"epoch": N}` that the
supervisor can watch beside `leadership.json`; with `signal`, it calls the
owner's hook `signal(verb, epoch)` as well (e.g. to start the listeners in
process). A hook that raises makes the action fail with its message.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from elections.core.actions import START_RELAY, STOP_RELAY, Action
from elections.executors.base import CommandFailed, Outcome, Recheck, applied, no_recheck
from elections.ports.localstate import LocalState


def relay_wanted(data_dir: str | os.PathLike[str]) -> int | None:
    """The epoch the relay is wanted for, or None (no marker, or unreadable)."""
    return LocalState(data_dir).relay_wanted()


class RelayExecutor:
    name = "relay"
    verbs = frozenset({START_RELAY, STOP_RELAY})

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        signal: Callable[[str, int], None] | None = None,
    ) -> None:
        if data_dir is None and signal is None:
            raise ValueError("RelayExecutor needs a data_dir, a signal hook, or both")
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.signal = signal

    def apply(self, action: Action, recheck: Recheck = no_recheck) -> Outcome:
        notes = []
        if self.data_dir is not None:
            notes.append(self._mark(action))
        if self.signal is not None:
            try:
                self.signal(action.verb, action.epoch)
            except Exception as exc:
                raise CommandFailed(f"relay hook refused {action.verb}: {type(exc).__name__}: {exc}") from exc
            notes.append("relay hook signalled")
        return applied(action, "; ".join(notes))

    def _mark(self, action: Action) -> str:
        assert self.data_dir is not None
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
