"""The code held to the model (issue 37, item 5): a run of `verify/pool.pml` — a SPIN trail or
a random simulation — replayed step by step through the pure core (`core.serving`,
`core.serving_book`, `core.decide`, `core.lease_memory`), which must decide what the model
decided.

The model prints, after each of its steps (`@ ...`), one line of its whole state (`S ...`) and,
inside a step, `C x` for a claim member x attempted. Each step is checked on its own, from the
model's state before it: the code's objects are built from that state (an `Adherence`, a
`Memory`, a `ServingRight`, a `LeaseRead`), asked, and their answer compared with the model's
state after the step. Steps are not chained through the code's own state, so an abstraction of
the model (A1-A15 in its head) never drifts the two apart; a rule changed in the code changes
an answer and fails the replay.

Time: one model tick is one second of every member's clock (rho = 0 here: the rates are the
model's A2 and `tests/test_spin_model.py`'s inequalities). Each tick threshold k of the model is
put between k - 1 and k seconds (`TIMING`, `SERVING`), so an integer age compares as in the model.

What each step checks:
- every step, every member: the relay's gate (`min(renew deadline, ServingRight.until)`, fenced
  or not) is open exactly when the model's `gate(x)` is;
- `x hears s`: `adhere` gives the model's adherence (leader, epoch, heard now or not, resigned,
  what its leader said it serves by); the ack s's beacon carries (`ServingBook.outgoing`) is
  taken (`ServingRight.acked`) exactly when the model took it, and `settle` gives the mode;
- `x looks` (and `x looks, its holder gone`: with the evidence of death, `Observation.gone`, for
  the holder `evidence_subject` names once the model's holder crashed; `x looks, past the older
  writers' bound`: the code's bound put there, `Memory.older_from`; `x looks, its clock slow`: the
  TTL not yet over on its clock, `Memory.seen_at` put half a tick short of it): `track` and `decide` (with
  `silent_holder` over the other members' beacons)
  contend exactly when the model attempted a claim, and the right `ServingBook.taken` gives
  serves by the model's mode and waits out the model's leader (rule 1);
- `x releases` / `x hands off`: the resign says `fenced` (`ServingRight.clean`) exactly when
  the model's does (rule 6);
- `x requalifies`: `ServingRight.lapsed` says so.
Steps that the model's assumption V (A8) shapes (a read that is no evidence while a renewal was
hidden from the reader) are counted, not compared: the code's `vouched` needs the beacons'
renewal numbers the model does not keep.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from elections.core.beacons import FOLLOWER, LEADER, RESIGN, Beacon
from elections.core.decide import Observation, Timing, Verdict, decide, evidence_subject
from elections.core.lease import LeaseRead, LeaseRecord
from elections.core.lease_memory import Memory, track
from elections.core.serving import (
    ACKED,
    LEASE,
    AckReport,
    Adherence,
    ServingRight,
    ServingTiming,
    said_acks,
    silent_holder,
)
from elections.core.serving_book import ServingBook

N, NONE, UNKNOWN = 3, 3, 4  # UNKNOWN: a start's adherence (`ServingBook.started`)
VALID, JUNK, MISSING, OLD = 1, 2, 3, 4
ACAP = 2  # the model's saturated ack age: no ack within W
# The model's ticks as seconds (A1, A2): W_HI 1, S_LO 2, RD_HI 2, TTL_LO 3, LOK_LO 3, BG 0.
TIMING = Timing(ttl=2.5, renew=1.0, poll=1.0, deadline=2.5)  # TTL - deadline = 0: blind_after (BG)
SERVING = ServingTiming(interval=1.0, window=1.5, silence=1.5)
KMSN = "9999-9999-99-99"


def node(i: int) -> str:
    return f"m{i}"


@dataclass
class State:
    """One `S` line: each name a tuple of three members' values, or the store's fields."""

    f: dict[str, tuple[int, ...]]

    def __getattr__(self, name: str) -> tuple[int, ...]:
        try:
            return self.f[name]
        except KeyError:
            raise AttributeError(name) from None

    def ack(self, x: int, y: int) -> int:
        a = self.f["ack"]
        return {(0, 1): a[0], (0, 2): a[1], (1, 0): a[2], (1, 2): a[3], (2, 0): a[4], (2, 1): a[5]}[(x, y)]


@dataclass
class Step:
    event: str
    claims: list[int]
    after: State


@dataclass
class Replay:
    """What the replay compared: steps of each kind, and every disagreement."""

    compared: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)
    forged: bool = False  # the trail's model ran -DFORGED_GONE: evidence of death while the holder lives

    def count(self, kind: str, ok: bool, why: str) -> None:
        self.compared[kind] = self.compared.get(kind, 0) + 1
        if not ok:
            self.wrong.append(f"{kind}: {why}")

    def skip(self, kind: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1


def parse_state(line: str) -> State:
    f: dict[str, tuple[int, ...]] = {}
    for part in line.split()[1:]:
        name, _, value = part.partition("=")
        f[name] = tuple(int(v) for v in value.split(","))
    return State(f)


WHO = ("an", "swn", "crn", "mh")  # fields whose values name a member


def renamed(state: State, cur: list[int]) -> State:
    """A state printed under the search's renaming of the members (A14) in the run's own names:
    `cur[label]` is the member the label stands for now."""
    f = dict(state.f)
    for name, value in state.f.items():
        if len(value) == N and name not in ("L", "O", "ack"):
            vals = [cur[v] if name in WHO and v < N else v for v in value]
            out = [0] * N
            for label in range(N):
                out[cur[label]] = vals[label]
            f[name] = tuple(out)
    who = lambda v: cur[v] if v < N else v  # noqa: E731
    kind, le, lh, lrel, lho = state.L
    f["L"] = (kind, le, who(lh), lrel, who(lho))
    oe, oh, orel, oho = state.O
    f["O"] = (oe, who(oh), orel, who(oho))
    pairs = ((0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1))
    acks = dict(zip(pairs, state.f["ack"], strict=True))
    f["ack"] = tuple(acks[next((a, b) for a, b in pairs if (cur[a], cur[b]) == pair)] for pair in pairs)
    return State(f)


def parse(output: str) -> tuple[State | None, list[Step]]:
    """SPIN's printout of a run: the steps, each with its claims and the state after it. A `P`
    line (pan's replay of a search with -DSYM) says the state was renamed: later labels are
    translated back to the run's own members."""
    steps: list[Step] = []
    event: str | None = None
    claims: list[int] = []
    cur = list(range(N))
    for raw in output.splitlines():
        line = " ".join(raw.split())
        if line.startswith("@ "):
            names = tuple(cur)
            event, claims = re.sub(r"\b(\d)\b", lambda m, names=names: str(names[int(m[1])]), line[2:]), []
        elif line.startswith("C "):
            claims.append(cur[int(line.split()[1])])
        elif line.startswith("P "):
            p = [int(v) for v in line.split()[1:]]
            new = [0] * N
            for label in range(N):
                new[p[label]] = cur[label]
            cur = new
        elif line.startswith("S ") and event is not None and line.endswith(tuple("0123456789")):
            steps.append(Step(event, claims, renamed(parse_state(line), cur)))
            event = None
    return None, steps


# -- the code's objects, built from the model's state at tick t ---------------------------------
def adherence(s: State, x: int, t: float) -> Adherence | None:
    if s.an[x] in (NONE, UNKNOWN):
        return None
    mode = ACKED if s.am[x] else LEASE
    return Adherence(node(s.an[x]), s.ae[x], f"b{s.an[x]}", 0, t - s.hz[x], mode, bool(s.ares[x]))


def right(s: State, x: int, t: float) -> ServingRight | None:
    if s.re[x] == 0:
        return None
    r = ServingRight(s.re[x], f"b{x}", SERVING.window, ACKED if s.mode[x] else LEASE)
    r.told, r.fenced = bool(s.told[x]), bool(s.fenced[x])
    r.lease_ok_at = t - s.tk[x] + TIMING.ttl * (1 + 0.01) / (1 - 0.01) if s.rlok[x] else t - s.tk[x]
    for y in range(N):
        if y != x and s.ack(x, y) < ACAP:
            r.acks[node(y)] = t - s.ack(x, y)
    if s.swn[x] != NONE:
        r.self_from = t - s.swa[x] + SERVING.silence
        if s.swn[x] != UNKNOWN:
            r.self_wait = (node(s.swn[x]), s.swe[x], f"b{s.swn[x]}")
    return r


def gate(s: State, x: int, t: float) -> bool:
    """The relay's gate as the elector publishes it (`Elector.leader_valid_until`)."""
    r = right(s, x, t)
    if not s.up[x] or r is None or r.fenced:
        return False
    until = t - s.ren[x] + TIMING.deadline
    bound = r.until(N, t)
    return min(until, bound if bound is not None else math.inf) > t


def book(s: State, x: int, t: float) -> ServingBook:
    started = t - s.hz[x] if s.an[x] == UNKNOWN else -math.inf
    b = ServingBook(
        node(x), f"b{x}", SERVING, TIMING.ttl, adherence(s, x, t), right(s, x, t), started=started
    )
    if s.crn[x] != NONE:
        b.clean_release = (node(s.crn[x]), s.cre[x], t)
    return b


def record(holder: int, epoch: int, released: int, to: int, seq: int) -> LeaseRecord:
    return LeaseRecord(KMSN, "station", "10.0.0.1", 9530, 1, epoch, "", node(holder), seq,
                       0 if released else TIMING.ttl, None if to == NONE else node(to))  # fmt: skip


def lease_read(s: State, x: int) -> LeaseRead:
    kind, le, lh, lrel, lho = s.L
    if kind == VALID:  # a renewal it has not read yet is a newer renew_seq than the one it saw
        return LeaseRead("valid", record=record(lh, le, lrel, lho, 1 if s.miss[x] else 0), revision="r")
    if kind == OLD:
        oe, oh, orel, oho = s.O
        return LeaseRead("valid", record=record(oh, oe, orel, oho, 0), revision="o")
    if kind == JUNK:
        return LeaseRead("corrupt", detail="junk", revision="j")
    return LeaseRead("missing", detail="no lease file", revision="")


def memory(s: State, x: int, t: float) -> Memory:
    seen = None if s.mh[x] == NONE else (node(s.mh[x]), s.me[x], 0)
    kind, le, lh, lrel, _ = s.L
    if kind == OLD:  # the copy put back, as the record the model says this member saw (or not)
        le, lh, lrel = s.O[0], s.O[1], s.O[2]
    news = s.onew[x] if kind == OLD else s.miss[x]
    same = seen is not None and kind in (VALID, OLD) and (node(lh), le) == seen[:2] and not news
    return Memory(node(x), seen_key=seen, seen_at=None if seen is None and s.known[x] == 0 else t - s.lage[x],
                  seen_ttl=TIMING.ttl, seen_released=bool(lrel) if same else False, max_epoch=s.known[x],
                  looked_at=None if seen is None and s.known[x] == 0 else t - s.rdage[x],
                  blind_restart=bool(s.bspent[x]),
                  older_spent=bool(s.ospent[x]),  # issue 37: an older writer refused for its bound
                  # the record lying there, as seen (renew_seq 0): one written since (miss) is newer
                  writers=((node(lh), le, 0),) if kind in (VALID, OLD) and lh != NONE else ())  # fmt: skip


def beacon(s: State, y: int, t: float) -> Beacon:
    """Member y's beacon as the model's `hear` reads it: a leader's, a resign, or a follower's."""
    if s.lead[y] > 0:
        serve = ACKED if s.told[y] else LEASE
        return Beacon(KMSN, node(y), "10.0.0.1", 9530, LEADER, s.lead[y], 0, f"b{y}", 1, serve=serve)
    if s.rese[y] > 0:
        fenced = s.rese[y] if s.resc[y] else 0
        return Beacon(KMSN, node(y), "10.0.0.1", 9530, RESIGN, s.rese[y], 0, f"b{y}", 1, fenced=fenced)
    said = book(s, y, t).outgoing(None, 1, N, t)
    return Beacon(KMSN, node(y), "10.0.0.1", 9530, FOLLOWER, s.known[y], 0, f"b{y}", 1, **said)  # type: ignore[arg-type]


def reports(s: State, x: int, t: float) -> list[AckReport]:
    """The other members' latest beacons as x's silence rule reads them (A6: current ones)."""
    out = []
    for y in range(N):
        if y == x or not s.up[y]:
            continue
        b = beacon(s, y, t)
        out.append(AckReport(node(y), 0.0, b.ack_node, b.ack_epoch, b.quiet_ms / 1000))
    return out


# -- the steps ------------------------------------------------------------------------------------
def replay(steps: list[Step], result: Replay | None = None) -> Replay:
    out = result or Replay()
    before: State | None = None
    t = 0.0
    for step in steps:
        ev, after = step.event, step.after
        if ev == "tick":
            t += 1.0
        elif before is not None:
            check_step(out, ev, step.claims, before, after, t)
        for x in range(N):
            code = gate(after, x, t)
            why = f"after '{ev}' at {t:g}: member {x}'s gate code {code} model {after.gate[x]}"
            out.count("gate", code == bool(after.gate[x]), why)
        before = after
    return out


HEARS = re.compile(r"^(\d) hears (\d)$")
# the second: with evidence of death (A16); the third: past the bound of an older writer's restarts
# `, its clock slow` (the audit of the d_steps): the TTL_LO of an unchanged lease is over, the TTL by the
# member's own slow clock not yet
LOOKS = re.compile(r"^(\d) looks(, its clock slow)?(, its holder gone)?(, past the older writers' bound)?$")
RELEASES = re.compile(r"^(\d) (releases|hands off to \d)$")
REQUALIFIES = re.compile(r"^(\d) requalifies$")


def check_step(out: Replay, ev: str, claims: list[int], p: State, q: State, t: float) -> None:
    if m := HEARS.match(ev):
        hears(out, int(m[1]), int(m[2]), p, q, t)
    elif m := LOOKS.match(ev):
        slow, gone, past = (m[i] is not None for i in (2, 3, 4))
        looks(out, int(m[1]), claims, p, q, t, gone=gone, past=past, slow=slow)
    elif m := RELEASES.match(ev):
        x = int(m[1])
        r = right(p, x, t)
        assert r is not None
        r.fenced = True  # the worker fences before it writes the release (`Elector.release`)
        out.count("release", r.clean(t) == bool(q.resc[x]),
                  f"'{ev}' at {t:g}: clean code {r.clean(t)} model {q.resc[x]}")  # fmt: skip
    elif m := REQUALIFIES.match(ev):
        x = int(m[1])
        r = right(p, x, t)
        lapsed = r is not None and r.lapsed(N, t)
        out.count("requalify", lapsed, f"'{ev}' at {t:g}: the code's right has not lapsed")


def hears(out: Replay, x: int, s: int, p: State, q: State, t: float) -> None:
    b = beacon(p, s, t)
    if b.role in (LEADER, RESIGN):
        mine = book(p, x, t)
        mine.heard(b, p.lead[x] or None, p.known[x], t)
        got = mine.adherence
        want = adherence(q, x, t)
        key = lambda a: None if a is None else (a.node, a.epoch, a.heard_at, a.resigned)  # noqa: E731
        modes = got is None or want is None or got.mode == want.mode or b.role == RESIGN
        same = key(got) == key(want) and modes
        out.count("adhere", same, f"'{x} hears {s}' at {t:g}: code {got} model {want}")
    if p.lead[x] > 0 and p.re[x] == p.lead[x] and b.role == FOLLOWER:
        r = right(p, x, t)
        assert r is not None
        acks = b.ack_node == node(x) and b.ack_epoch == p.lead[x]
        sent = t - p.hz[s]  # the beacon of x its adherence last heard (A4: no transit time)
        # an ack of a beacon sent W or more ago keeps no gate open: the model keeps none (ACAP)
        news = acks and p.hz[s] < ACAP and sent > r.acks.get(node(s), -math.inf)
        model = q.ack(x, s) < p.ack(x, s)
        out.count("ack", news == model, f"'{x} hears {s}' at {t:g}: ack taken code {news} model {model}")
        if news:
            r.acks[node(s)] = sent
        mode = r.settle(N, t)
        want_mode = ACKED if q.mode[x] else LEASE
        out.count("mode", mode == want_mode, f"'{x} hears {s}' at {t:g}: mode code {mode} model {q.mode[x]}")


def looks(
    out: Replay, x: int, claims: list[int], p: State, q: State, t: float, gone: bool = False,
    past: bool = False, slow: bool = False,
) -> None:  # fmt: skip
    read = lease_read(p, x)
    evidence = read.status == "valid" and read.record is not None and read.record.epoch >= p.known[x]
    if not evidence and (p.rmiss[x] or p.vch[x]):
        out.skip("look (assumption V)")
        return
    before = memory(p, x, t)
    if past:
        # the model leaves the bound's instant open, and this look is past it: the code's bound
        # (one TTL of such restarts, `lease_memory.older_restart`) is put where the model took it
        before = replace(before, older_from=t - TIMING.ttl - 1.0)
    if slow:
        # the model's TTL_LO is over, the TTL on this member's slow clock not yet: its timer put half
        # a tick short of the TTL (the model says neither how slow nor how long: A2's saturated ages)
        assert before.seen_at is not None
        before = replace(before, seen_at=t - (TIMING.ttl - 0.5))
    mem = track(before, read, t, TIMING.ttl, TIMING.blind_after)
    subject = evidence_subject(mem, read)
    silent = dead = None
    if subject is not None:
        why = silent_holder(subject[0], subject[1], adherence(p, x, t), reports(p, x, t), N, SERVING, t)
        silent = (subject[0], subject[1], why) if why else None
        holder = int(subject[0][1:])
        # the model's evidence: its holder crashed (A16), or forged; the code counts it only of a holder
        # heard serving by acks (rule 7's guard, `BeaconService.evidence`)
        if (
            gone
            and holder != x
            and (p.died[holder] or out.forged)
            and said_acks(subject[0], subject[1], adherence(p, x, t))
        ):
            dead = (subject[0], subject[1], f"{subject[0]}'s agent is gone")
    decision = decide(mem, Observation(read, gone=dead, silent=silent), t, TIMING)
    contends = decision.verdict is Verdict.CONTEND
    model = x in claims
    why = f"'{x} looks' at {t:g}: code {decision} model claims {model}"
    out.count("look", contends == model, why)
    if gone:
        out.count("look (holder gone)", contends == model, why)
    if past:
        out.count("look (past the older writers' bound)", contends == model, why)
    if slow:
        out.count("look (its clock slow)", contends == model, why)
    if not (contends and model and q.lead[x] > 0 and q.lead[x] != p.lead[x]):
        return
    b = book(p, x, t)
    rec = read.record
    after = (rec.node, rec.epoch) if rec is not None else None
    b.taken(q.lead[x], decision.cause, N, after, t)
    r = b.right
    assert r is not None
    mode_ok = r.mode == (ACKED if q.mode[x] else LEASE)
    why = f"'{x} looks' at {t:g} ({decision.cause}): mode code {r.mode} model {q.mode[x]}"
    out.count("take", mode_ok, why)
    out.count(f"take ({decision.cause})", mode_ok, why)
    waits = r.self_wait[0] if r.self_wait is not None else "unknown" if r.self_from > -math.inf else None
    want = None if q.swn[x] == NONE else "unknown" if q.swn[x] == UNKNOWN else node(q.swn[x])
    out.count("self wait", waits == want, f"'{x} looks' at {t:g}: waits out code {waits} model {want}")
