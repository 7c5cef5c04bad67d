"""The agent's alarm for a share that is not shared (issue 19 item 6; `core.share_split`).

Fed at every survey with what the agent has anyway (its beacon board's
members, the member files its store listed, the lease it read); what it finds
goes into ``pool.json`` (``share_split``), whence the panel, the metric
``stkrelay_share_split`` and ``relayctl doctor`` read it. Each finding is
logged once, when it appears; nothing here acts on the lease.
"""

from __future__ import annotations

import logging
from typing import Any

from elections.core.share_split import SplitWatch
from elections.core.untrusted import as_object

log = logging.getLogger("stkrelay.elector")


class SplitAlarm:
    def __init__(self, node: str, store: str, grace: float) -> None:
        self.watch = SplitWatch(node, store, grace)
        self.said: set[tuple[str, str]] = set()

    def survey(
        self, beacons: dict[str, Any], docs: dict[str, Any] | None, lease: dict[str, Any] | None,
        lease_status: str, now: float,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """The findings now, as ``pool.json`` carries them (`docs` None: the store was not
        listed; a `lease_status` other than valid or missing: the lease was not read)."""
        heard = as_object(beacons.get("members"))
        holder = (lease["node"], lease["epoch"]) if lease is not None else None
        known = lease_status in ("valid", "missing")
        found = self.watch.observe(heard, None if docs is None else set(docs), holder, now, known)
        for f in found:
            if (f.node, f.kind) not in self.said:
                log.error("SHARE SPLIT: %s", f.detail)
        self.said = {(f.node, f.kind) for f in found}
        return [f.to_doc() for f in found]
