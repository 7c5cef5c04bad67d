"""Which addresses this leader holds: the executors' outcomes, written down for the relay.

The relay serves the address that moves (issue 19, ADR 0011's L3
continuity): while an executor holds a VIP or a secondary IP for this leader,
the relay (or the fencing proxy) listens there too. It learns which from
`DATA_DIR/addresses.json` (`LocalState.held_addresses`), which `AddressBook`
keeps from the outcomes of the leader duties' plans (`run_plan(notify=...)`),
without any executor knowing about it:

- an *applied* `assign_vip` / `assign_secondary_ip` of epoch N adds its address
  with epoch N (the relay of epoch N listens there; a relay of another epoch
  does not, so an entry a crash left behind serves nobody);
- a `release_vip` / `release_secondary_ip` of epoch N that ran (applied, or
  failed: this agent is letting go either way) removes the address if its
  entry is of epoch N or older; a fenced one changes nothing (this agent holds
  a newer epoch, whose entry stands).

The duty threads of two epochs may finish at once: one lock orders the writes.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading

from elections.core.actions import ASSIGN_IP, ASSIGN_VIP, RELEASE_IP, RELEASE_VIP, Action
from elections.executors.base import APPLIED, FAILED, Outcome
from elections.ports.local.localstate import LocalState
from elections.ports.local.relay_files import HeldAddress

log = logging.getLogger("stkrelay.actions")

ACQUIRING = {ASSIGN_VIP: "vip", ASSIGN_IP: "secondary_ip"}
RELEASING = {RELEASE_VIP: "vip", RELEASE_IP: "secondary_ip"}


def address_of(action: Action) -> str | None:
    """The address an address verb moves (canonical), or None for any other action."""
    if action.verb not in ACQUIRING and action.verb not in RELEASING:
        return None
    text = action.args.get("address") if action.verb in (ASSIGN_VIP, RELEASE_VIP) else None
    text = text or action.args.get("private_ip")
    try:
        return str(ipaddress.ip_address(str(text)))
    except ValueError:
        return None


def updated(held: tuple[HeldAddress, ...], outcome: Outcome) -> tuple[HeldAddress, ...] | None:
    """`held` after `outcome` (pure), or None when the outcome changes nothing."""
    action = outcome.action
    address = address_of(action)
    if address is None:
        return None
    others = tuple(h for h in held if h.address != address)
    if action.verb in ACQUIRING:
        if outcome.status != APPLIED:
            return None
        entry = HeldAddress(address, action.epoch, ACQUIRING[action.verb], action.executor, action.target)
        return (*others, entry)
    if outcome.status not in (APPLIED, FAILED):
        return None
    if not any(h.address == address and h.epoch <= action.epoch for h in held):
        return None
    return others


class AddressBook:
    """`notify` for `run_plan`: keeps `addresses.json` as the outcomes say."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.local = LocalState(data_dir)
        self.lock = threading.Lock()

    def __call__(self, outcome: Outcome) -> None:
        with self.lock:
            after = updated(self.local.held_addresses(), outcome)
            if after is None:
                return
            try:
                self.local.write_held_addresses(after)
            except OSError as exc:  # the relay then does not listen there: said, not hidden
                log.warning("cannot record the addresses this leader holds in %s: %s", self.local.dir, exc)
                return
        held = ", ".join(f"{h.address} (epoch {h.epoch})" for h in after)
        log.info("addresses held for the relay: %s", held or "none")
