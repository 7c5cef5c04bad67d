"""What the agent publishes for local processes: leadership.json and pool.json.

leadership.json says whether it leads, and until when; pool.json is its survey of the pool, judged
on its own clock.

A mixin of `runtime.agent.Agent` (its state is the agent's, set up in `Agent.__init__`). Monotonic
time is shared by all processes of one machine, never compared across machines.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from elections.core.beacons import member_digest
from elections.core.commands import PoolCommands
from elections.core.decide import Decision
from elections.core.eligibility import Freshness, judge, observe, unheard
from elections.core.evidence import Refusals, merged
from elections.core.gate import gate_of
from elections.core.serving import ACKED
from elections.core.skew import reading_of
from elections.ports.clock import Clock
from elections.ports.localstate import Leadership, LocalState
from elections.ports.pool_view import MemberView, PoolView, entry_of, entry_sessions_of, web_tls_of
from elections.ports.share import SHARE_OPS
from elections.ports.stores import store_details
from elections.runtime.beacon_link import BeaconLink
from elections.runtime.bindings import PoolBindings
from elections.runtime.elector import Elector
from elections.runtime.member_reads import MemberReads
from elections.runtime.ownership import OwnershipWatch
from elections.runtime.share_split import SplitAlarm
from elections.runtime.witness_keeper import WitnessKeeper
from stkconfig.model import Config

log = logging.getLogger("stkrelay.agent")

# The serving right (docs/design.md §15): members counted, and how far an ack must move the gate to be
# published.
MEMBER_HORIZON_S, MEMBER_HORIZON_TTLS = 60.0, 6.0  # a member unheard on the share longer is not counted
GATE_STEP = 0.2  # seconds
REPUBLISH_WAIT = 2.0  # seconds the view's quick rewrite waits for the election lock


def _hears(doc: dict[str, Any]) -> list[str] | None:
    """A heartbeat's `hears` (whose beacons reach that member), None if it says nothing."""
    hears = doc.get("hears")
    return [h for h in hears if isinstance(h, str)] if isinstance(hears, list) else None


class Publishing:
    """The agent's leadership state and pool view, composed and written."""

    fresh: dict[str, Freshness]
    view: PoolView
    _gate_told: float  # the valid_until last published
    _told: threading.Event  # set at every publish that says this agent leads (`Roles._gate_opens`)
    # What it uses of the agent (set in `Agent.__init__`, or defined by another half).
    stk: Config
    clock: Clock
    local: LocalState
    refusals: Refusals
    commands: PoolCommands
    bindings: PoolBindings
    elector: Elector
    beacons: BeaconLink | None
    witness: WitnessKeeper | None  # the share's witness (issue 38), with the beacons
    member_reads: MemberReads
    ownership: OwnershipWatch
    split: SplitAlarm | None
    _publishing: threading.Lock
    lock: threading.RLock  # the election lock: every cycle and every write of the view under it
    _member_docs: tuple[dict[str, dict[str, Any]], bool] | None  # survey(): last members seen
    _fenced: int | None

    if TYPE_CHECKING:

        def _let_go_of_leftovers(self) -> None: ...

    def pool_size(self) -> int:
        """The members the serving right counts (docs/design.md §15): this one, and every
        member whose heartbeat this agent saw change, or whose validly signed beacon it
        heard, within `MEMBER_HORIZON`. A beacon is a member alive as surely as a
        heartbeat, and comes within an interval: a leader elected as the pool starts
        counts its members (and arms the fast path) before its first survey reads them."""
        horizon = max(MEMBER_HORIZON_S, MEMBER_HORIZON_TTLS * self.stk.lease_ttl)
        others = {n for n, m in self.view.members.items() if m.age is not None and m.age <= horizon}
        if self.beacons is not None:
            others.update(self.beacons.service.heard(horizon))
        return len(others | {self.stk.node})

    def unheard(self) -> dict[str, str]:
        """The members this agent's beacons say not to hand the lease to, and why
        (`core.eligibility.unheard`); none while beacons are off here."""
        if self.beacons is None:
            return {}
        docs = (self._member_docs or ({}, False))[0]
        hears = {n: _hears(d) for n, d in docs.items()}
        service = self.beacons.service
        listening = self.clock.monotonic() - service.started
        return unheard(self.stk.node, service.heard_ages(), hears, self.stk.beacon_interval, listening)

    def _republish(self) -> None:
        """The holder's beacons went quiet, or came back (`BeaconService.quiet`): pool.json again
        now, the last survey with that flag changed (nothing read: the election lock is held for
        one local write), so the station door holds or releases its new connections within a
        look. A cycle under way writes it anyway, unless it wrote its view before the change."""
        beacons = self.beacons
        if beacons is None:
            return
        until = self.clock.monotonic() + REPUBLISH_WAIT
        while not self.lock.acquire(timeout=0.1):
            # A cycle holds it: its own view will say it, unless it wrote that view already.
            if self.view.beacons.get("quiet") == beacons.service.quiet:
                return
            if self.clock.monotonic() > until:
                log.warning("pool view not rewritten for a quiet leader: the election lock is held")
                return
        try:  # the last survey with only the flag changed: no read of anything, the lock held for a write
            if self.view.updated is None:  # no survey yet: its first one says it
                return
            view = replace(self.view, updated=self.clock.monotonic(),
                           beacons={**self.view.beacons, "quiet": beacons.service.quiet})  # fmt: skip
            self.local.write_pool(view)
            self.view = view
        finally:
            self.lock.release()

    def _acked(self) -> None:
        """A member acknowledged one of our leader beacons: publish the gate if it moved
        by `GATE_STEP` or more (from the beacon thread; never under the election lock,
        which a hung share may hold for seconds)."""
        el = self.elector
        valid = el.leader_valid_until if el.is_leader else None
        untold = self.beacons is not None and self.beacons.service.serving_untold(el.memory.leader_epoch)
        if valid is not None and (valid - self._gate_told >= GATE_STEP or untold):
            self.publish(el.last)

    def survey(self, read_members: bool = True) -> PoolView:
        """This agent's view of the pool, judged on its own clock: the lease and
        every member's eligibility with reasons. Written to DATA_DIR/pool.json
        for the panel and for command checks in other local processes. Without
        `read_members`, the members' heartbeats are those of the last reading."""
        now = self.clock.monotonic()
        stk = self.stk
        read = self.elector.last_read
        lease = None
        # Only a lease its memory took (`Elector.accepted`): a valid read it refused as older than
        # what it saw (a replayed copy, `lease_memory.outdated`) leaves the newest it took shown, and
        # its entry forwarding there, not to the replayed holder (issue 40).
        shown = self.elector.accepted if read is not None and read.status == "valid" else None
        if shown is not None and shown.record is not None:
            rec = shown.record
            lease = {"node": rec.node, "epoch": rec.epoch, "ip": rec.ip, "port": rec.port,
                     "renew_seq": rec.renew_seq, "ttl_s": rec.ttl_s, "released": rec.released,
                     "handoff_to": rec.handoff_to}  # fmt: skip
        said = self._said()
        docs, reachable = self.member_reads.read(read_members, said)
        self._member_docs = docs, reachable  # the ownership watch reads the members' `holds` from it
        beacons = self.beacons.service.snapshot() if self.beacons is not None else {}
        refusals = self.refusals.to_doc(now)
        if beacons:  # refused datagrams show beside refused share records
            refusals = merged(refusals, beacons.pop("refusals"))
            if isinstance(beacons.get("serving"), dict):  # early takeovers deferred for want of evidence
                beacons["serving"]["deferred"] = dict(self.elector.deferred)
                if self.witness is not None:  # the store's side: its last write or refresh, and why
                    beacons["serving"]["witness_store"] = self.witness.to_doc()
        members = {}
        gone = self.unheard()
        for node, doc in docs.items():
            seq = doc.get("seq")
            if node in said and isinstance(seq, int) and said[node][0] > seq:
                seq = said[node][0]  # its beacons say it wrote a newer heartbeat (the same record)
            self.fresh[node] = observe(self.fresh.get(node, Freshness()), seq, now)
            v = judge(node, doc, self.fresh[node], now, stk.heartbeat_ttl, stk.promotion_hold, gate_of(doc))
            if node in gone:  # its beacons stopped: never a successor (`unheard`), shown as why
                v = replace(v, eligible=False, reasons=(*v.reasons, gone[node]))
            epoch = doc.get("epoch")
            members[node] = MemberView(
                eligible=v.eligible, reasons=v.reasons, age=v.age, priority=v.priority, ip=doc.get("ip"),
                drain=bool(doc.get("drain")), health=doc.get("health"), version=doc.get("version"),
                epoch=epoch if isinstance(epoch, int) else None, web_tls=web_tls_of(doc),
                clock=reading_of(doc), entry=entry_of(doc), entry_sessions=entry_sessions_of(doc),
            )  # fmt: skip
        status = read.status if read is not None else "unreachable"
        split = (
            self.split.survey(beacons, docs if reachable else None, lease, status, now) if self.split else []
        )
        view = PoolView(
            kmsn=stk.kmsn, node=stk.node, updated=now, lease=lease, share_split=split,
            lease_status=read.status if read is not None else "unreachable",
            lease_detail=read.detail if read is not None else "",
            store_reachable=reachable and read is not None, members=members,
            decision=str(self.elector.last or ""), paused=self.commands.paused,
            lease_seen_at=self._lease_seen_at(), command_clock=self.command_clock,
            refusals=refusals, beacons=beacons, share_ops=SHARE_OPS.total,
            share_ops_by=SHARE_OPS.kinds(),
            store=store_details(self.elector.store), ownership=self.ownership.snapshot(),
        )  # fmt: skip
        self.local.write_pool(view)
        return view

    def _successor(self) -> tuple[int, str, int] | None:
        """(epoch, ip, port) of the member this node just handed its lease to, while no newer
        lease was seen: its address from its member record as last read."""
        handed, seen = self.elector.handed, self.elector.memory.seen_key
        if handed is None or (seen is not None and seen[1] >= handed[1]):
            return None
        member = self.view.members.get(handed[0])
        ip = member.ip if member is not None else None
        return (handed[1], ip, self.stk.relay_port) if isinstance(ip, str) and ip else None

    def _say_own_record(self) -> None:
        """Tell the beacons this member's record as just written (`core.beacons`: mseq, mdig)."""
        record = self.elector.store.own_record
        if self.beacons is not None and record is not None:
            seq = record.get("seq")
            self.beacons.service.member_record = (seq if isinstance(seq, int) else 0, member_digest(record))

    def _said(self) -> dict[str, tuple[int, str]]:
        """(mseq, mdig) of the members whose fresh beacons say what their record is."""
        if self.beacons is None:
            return {}
        return self.beacons.service.member_records(self.beacons.heard_window)

    def _lease_seen_at(self) -> float | None:
        """When the lease was last seen renewed, for the panel: by this agent's own
        read, or later by the holder's beacons (a quiet follower reads no renewal)."""
        seen, mem = self.elector.memory.seen_at, self.elector.memory
        if self.beacons is None or seen is None or mem.seen_key is None or mem.seen_released:
            return seen
        heard = self.beacons.service.renewed_at(mem.seen_key[0], mem.seen_key[1])
        return max(seen, heard) if heard is not None else seen

    @property
    def command_clock(self) -> int:
        """The highest Lamport clock folded: of commands and of station binds."""
        return max(self.commands.clock, self.bindings.book.clock)

    def publish(self, decision: Decision | None) -> None:
        """Write leadership.json from the elector's memory as it is now. Under its own
        lock, state composed and written together: whichever of the election thread
        and the beacons' acks writes last wrote the newest memory."""
        with self._publishing:
            el = self.elector
            epoch = el.memory.leader_epoch
            leads = el.is_leader and epoch != self._fenced  # a fenced epoch is never claimed again
            service = self.beacons.service if self.beacons is not None else None
            mode = service.serving_mode(epoch) if service is not None else None  # before the gate is read
            valid_boot = el.leader_valid_until_boot if leads else None
            valid = el.leader_valid_until if leads else None
            state = Leadership(
                node=el.me.node,
                pid=os.getpid(),
                leader=leads,
                epoch=epoch if leads else None,
                max_epoch=el.memory.max_epoch,
                valid_until=valid,
                updated=self.clock.monotonic(),
                decision=str(decision) if decision else "",
                seen=el.memory.seen_key,
                valid_until_boot=valid_boot,
                successor=None if leads else self._successor(),
            )
            if self.local.stopping():  # the agent is stopping: it claims nothing
                state = state.disclaimed(state.decision)
            self.local.write_leadership(state)
            self._gate_told = valid if valid is not None and state.leader else float("-inf")
            if state.leader:
                self._told.set()
            if service is not None and epoch is not None and mode == ACKED and state.leader:
                service.serving_told(epoch)  # the beacons may say ACKED now: the relay reads this gate
        self._let_go_of_leftovers()
