"""What `relayctl doctor` says of this agent's station door (issue 36, `relay.server.station_door`,
``DATA_DIR/door.json``): where the site's stations on this PC dial, and where it leads them now."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from elections.ports.local.relay_files import EntryStatus


def door_check(door: EntryStatus, now: float, leader: str | None) -> tuple[str, bool, str]:
    """(check, ok, detail) of this agent's door, where `RELAY_FORWARD` gives it somewhere to listen."""
    name = _("station door")
    if not door.fresh(now):
        return name, False, _("the station door has not reported for 3 s (see agent.log): stations on "
                              "this PC that dial 127.0.0.1 may find nothing")  # fmt: skip
    if not door.listening:
        return name, False, _("not listening: %(error)s") % {"error": door.error or "?"}
    target: dict[str, Any] = door.target or {}
    if not target:
        return name, leader is None, _("listening on %(listen)s, leading nowhere (no leader read): stations "
                                       "are refused at once") % {"listen": door.listen}  # fmt: skip
    shown = {"listen": door.listen, "node": target.get("node"), "ip": target.get("ip"),
             "port": target.get("port"), "epoch": target.get("epoch")}  # fmt: skip
    counts = {"sessions": door.sessions, "streams": door.streams, "repointed": door.repointed}
    return name, True, (
        _("listening on %(listen)s, leading stations to %(node)s (%(ip)s:%(port)s, epoch %(epoch)s)") % shown
        + "; " + _("connections %(sessions)d, streams %(streams)d, leader changes followed %(repointed)d")
        % counts
    )  # fmt: skip
