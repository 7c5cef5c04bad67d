"""DATA_DIR and the systemd unit's state directory (issue 42: one data folder): under systemd the
agent's DATA_DIR must be the folder the unit made for its instance (`stkrelay.E241`), the one
`relayctl` and `stkuser` read through the ini too (`stkrelay.agent_data`); `stkconfig.places` checks it."""

from __future__ import annotations

import os

NOT_THE_UNITS_ID = "stkrelay.E241"


def not_the_units(data_dir: str, state_directory: str | None) -> str | None:
    """Why DATA_DIR is not the folder systemd made for this instance, or None (not under
    systemd, or the same folder). `$STATE_DIRECTORY` may list several, colon-separated."""
    if not state_directory:
        return None
    given = os.path.realpath(data_dir)
    states = [os.path.realpath(s) for s in state_directory.split(":") if s]
    if not states or given in states:
        return None
    return f"{data_dir} is not the unit's state directory {states[0]}"
