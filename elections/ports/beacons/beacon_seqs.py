"""The beacon board's replay memory kept in DATA_DIR (`beacon_seqs.json`, issue 40).

`BeaconBoard.seqs()` (the highest seq accepted per node and boot) is written here,
atomically, at most once a `SAVE_EVERY` while beacons come, and read back at start
through the guarded reader (`core.untrusted.load_object`): a board that forgot on a
restart took a dead leader's captured beacons, sent again, as news, and each named a
renewal that restarted the followers' lease timers. A missing file is a first start;
a damaged one (not JSON, too large, a link, unreadable) starts empty, and the cause is
counted with the board's refusals (the panel's banner, `relayctl doctor`) and logged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from elections.core.untrusted import BAD_FIELD, LOCAL, UNREADABLE, Untrusted, load_object
from elections.ports.share.sharefiles import read_regular
from stkhost.files import write_atomic

SEQS_NAME = "beacon_seqs.json"
SAVE_EVERY = 1.0  # seconds between writes while beacons come (the seqs of the last one may be lost)
VERSION = 1


class SeqFile:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> tuple[dict[str, Any], Untrusted | None]:
        """(the kept seqs, or {}; why the file was refused, or None)."""
        try:
            raw = read_regular(self.path, LOCAL.max_bytes)  # no link followed, a regular file only
        except Untrusted as exc:
            return {}, exc
        except OSError as exc:
            return {}, Untrusted(UNREADABLE, f"{SEQS_NAME}: {exc.strerror or exc}")
        if raw is None:
            return {}, None
        try:
            doc = load_object(raw, LOCAL, SEQS_NAME)
        except Untrusted as exc:
            return {}, exc
        seqs = doc.get("seqs")
        if not isinstance(seqs, dict):
            return {}, Untrusted(BAD_FIELD, f"{SEQS_NAME} holds no seqs")
        return seqs, None

    def save(self, seqs: dict[str, dict[str, int]]) -> None:
        """Replace the file with `seqs`, all or nothing (OSError if it cannot be written)."""
        doc = {"v": VERSION, "seqs": seqs}
        # Aside: DATA_DIR is watched (the supervisor, the relay), and a write wakes them once.
        write_atomic(self.path, json.dumps(doc, separators=(",", ":")).encode(), tag=str(os.getpid()),
                     aside=True)  # fmt: skip
