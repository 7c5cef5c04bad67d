"""The panel says every decision in the reader's language (elections/web/panel/words.py `decision`):
each reason form core.decide, runtime.elector and runtime.watch write — found in their code, so a
form added later without a translation fails here — and decisions made by the real `decide()`
on constructed memories and reads, and by a real elector, shown in zh_Hant with no English
word of their templates left."""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_panel_support
from memstore import MemoryLeaseStore
from test_runtime_elector import elected_pool

from elections.core.decide import Observation, Timing, decide
from elections.core.lease import LeaseRead, LeaseRecord, parse_lease
from elections.core.lease_memory import Memory, track
from stkhost.clock import FakeClock

ROOT = Path(__file__).resolve().parent.parent
WRITERS = ("elections/core/decide.py", "elections/runtime/elector.py", "elections/runtime/watch.py")
KEPT = {"TTL", "etcd"}  # names the Chinese keeps as they are
T = Timing(ttl=10, renew=3, poll=2, deadline=7)
DESCRIBED = "S001 epoch 3 seq 5 at 10.0.0.1:9530"
SILENT = "S001 silent for 1.90 s ≥ S 1.82 s, and so say S003 (2 of 3 members)"
GONE = ("S001's agent is gone: liveness connection ended 0.40 s ago and no leader beacon of epoch 3 "
        "(boot 7) for 1.20 s")  # fmt: skip
# What each placeholder of a template may hold (its expression as written there), beside "7".
SAMPLES = {
    "rec.describe()": [DESCRIBED],
    "holder": ["S001 epoch 3", "no one"],
    "why": [SILENT, GONE],
    "decision.reason": ["no leader seen", "no longer eligible: drained", "promote of S002 requested"],
    "obs.serving_lapsed": ["no majority of 3 members within W 1.5 s: majority lost 0.20 s ago"],
    "why_not": ["the witness record is missing"],
    "_no_evidence(read, memory)": ["no lease file"],
    "what": ["", " (no lease file)"],
}
dj = test_panel_support.dj


def english_words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z]{2,}", text)) - KEPT


def zh(text: str) -> str:
    from django.utils import translation

    from elections.web.panel.words import decision

    with translation.override("zh-hant"):
        return decision(text)


def templates(path: Path) -> Iterator[tuple[str, str, ast.JoinedStr | ast.Constant]]:
    """(function, verdict, reason) of every `Decision(Verdict.X, reason)` written in `path` whose
    reason is an f-string or text (a name is followed to the nearest f-string assigned to it in
    the same function), and runtime.watch's `_decision` returns ("watching")."""
    tree = ast.parse(path.read_text())
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        assigned = sorted(
            ((n.lineno, n.targets[0].id, n.value) for n in ast.walk(fn)
             if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
             and isinstance(n.value, ast.JoinedStr | ast.Constant)),
            key=lambda a: a[0],
        )  # fmt: skip
        for call in ast.walk(fn):
            if isinstance(call, ast.Return) and fn.name == "_decision" and call.value is not None:
                assert isinstance(call.value, ast.JoinedStr | ast.Constant)
                yield fn.name, "", call.value  # its verdict ("watching") is in the text
            if not (
                isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Decision"
            ):
                continue
            verdict_arg, reason = call.args[0], call.args[1]
            assert isinstance(verdict_arg, ast.Attribute)
            verdict = verdict_arg.attr.lower()
            if isinstance(reason, ast.Name):
                found = [v for line, name, v in assigned if name == reason.id and line < call.lineno]
                if not found:
                    yield fn.name, verdict, ast.Constant(value=f"<{reason.id}>")  # followed below
                    continue
                reason = found[-1]
            assert isinstance(reason, ast.JoinedStr | ast.Constant), ast.unparse(reason)
            yield fn.name, verdict, reason


def nested_templates(path: Path) -> Iterator[tuple[str, str, ast.JoinedStr]]:
    """core.decide's texts inside a reason: `_no_evidence`'s (a WAIT's "no evidence: …") and
    `early_refusal`'s (a deferred early takeover's), each set in the reason that carries it."""
    tree = ast.parse(path.read_text())
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name in ("_no_evidence", "early_refusal"):
            for ret in ast.walk(fn):
                if not isinstance(ret, ast.Return) or ret.value is None:
                    continue
                value = ret.value.elts[1] if isinstance(ret.value, ast.Tuple) else ret.value
                if isinstance(value, ast.JoinedStr):
                    yield fn.name, "wait", value


def renderings(template: ast.JoinedStr | ast.Constant) -> Iterator[str]:
    if isinstance(template, ast.Constant):
        yield str(template.value)
        return
    holes = [ast.unparse(v.value) for v in template.values if isinstance(v, ast.FormattedValue)]
    for choice in itertools.product(*(SAMPLES.get(h, ["7"]) for h in holes)):
        picks = iter(choice)
        yield "".join(v.value if isinstance(v, ast.Constant) else next(picks) for v in template.values)


def constant_words(template: ast.JoinedStr | ast.Constant) -> set[str]:
    if isinstance(template, ast.Constant):
        return english_words(str(template.value))
    return english_words("".join(v.value for v in template.values if isinstance(v, ast.Constant)))


def said_somehow(verdict: str, template: ast.JoinedStr | ast.Constant, wrap: str = "{}") -> str | None:
    """A rendering of `template` (its placeholders filled with `SAMPLES`) the panel says in zh_Hant
    with none of the template's English words left, or None."""
    forbidden = constant_words(template)
    for text in renderings(template):
        english = f"{verdict}: {wrap.format(text)}" if verdict else wrap.format(text)
        shown = zh(english)
        if shown != english and not any(re.search(rf"\b{w}\b", shown) for w in forbidden):
            return shown
    return None


def test_every_reason_form_in_the_code_is_said_in_zh_hant(dj):
    unfollowed, unsaid, seen = set(), [], 0
    for file in WRITERS:
        path = ROOT / file
        for fn, verdict, template in templates(path):
            if isinstance(template, ast.Constant) and str(template.value).startswith("<"):
                unfollowed.add((file, fn, str(template.value)))
                continue
            seen += 1
            if said_somehow(verdict, template) is None:
                unsaid.append(f"{file} {fn}: {verdict}: {ast.unparse(template)}")
        for fn, verdict, template in nested_templates(path):
            seen += 1
            wrap = ("no evidence: {}; lease of S001 epoch 3 times out in 2.0 s" if fn == "_no_evidence" else
                    f"early takeover of S001 epoch 3 deferred, no evidence: {{}} ({SILENT}); lease of S001 "
                    f"epoch 3 times out in 2.0 s")  # fmt: skip
            if said_somehow(verdict, template, wrap) is None:
                unsaid.append(f"{file} {fn}: {ast.unparse(template)}")
    assert not unsaid, "reasons the panel shows in English:\n" + "\n".join(unsaid)
    assert seen >= 35, seen  # the scan found the forms (it would pass on finding none)
    # Reasons passed on from elsewhere: the planned hand-off's why (runtime.policy, "promote of S002
    # requested") and an early takeover's evidence (core.liveness, core.serving): the decide() cases below.
    assert unfollowed == {("elections/core/decide.py", "decide", "<why>"),
                          ("elections/core/decide.py", "_holder_gone", "<why>")}, unfollowed  # fmt: skip


def rec(node: str = "S001", epoch: int = 3, seq: int = 5, released: bool = False,
        handoff: str | None = None) -> LeaseRecord:  # fmt: skip
    return LeaseRecord(kmsn="K", station=node, ip="10.0.0.1", port=9530, pid=1, epoch=epoch,
                       lease_until="20260615203015", node=node, renew_seq=seq, ttl_s=0 if released else 10,
                       handoff_to=handoff)  # fmt: skip


def valid(r: LeaseRecord) -> LeaseRead:
    return LeaseRead("valid", record=r, detail=r.describe(), revision=f"rev-{r.key}")


def seen(*reads: tuple[float, LeaseRead], me: str = "S002") -> Memory:
    mem = Memory(node=me)
    for now, read in reads:
        mem = track(mem, read, now, T.ttl)
    return mem


def leader(epoch: int = 3, renewed_at: float = 0.0, me: str = "S001") -> Memory:
    return Memory(node=me, leader_epoch=epoch, renewed_at=renewed_at, renew_seq=5, seen_key=("S001", 3, 5),
                  seen_at=renewed_at, seen_ttl=T.ttl, max_epoch=epoch)  # fmt: skip


def decided() -> list[str]:
    """Decisions of the real `decide()` (and a real elector), one of each form the panel may show."""
    missing, empty = parse_lease(None, "t"), parse_lease(b"", "t")
    unsigned = parse_lease(rec().encode("another pool's key"), "t")  # signed with another key
    assert unsigned.status == "forged" and missing.status == "missing" and empty.status == "corrupt"
    alive = valid(rec())
    out = []

    def say(mem: Memory, obs: Observation, now: float) -> None:
        out.append(str(decide(mem, obs, now, T)))

    say(Memory(node="S002"), Observation(missing), 0)  # first
    say(seen((0, alive)), Observation(alive), 1)  # follower holds
    say(seen((0, alive)), Observation(None), 1)  # store unreachable
    for read in (missing, empty, unsigned):
        say(seen((0, alive), (1, read)), Observation(read), 2)  # no evidence
        say(seen((0, alive), (1, read)), Observation(read), 11)  # expired, with the read's detail
    say(seen((0, alive)), Observation(alive), 11)  # expired
    say(seen((0, valid(rec(epoch=4))), (1, alive)), Observation(alive), 2)  # a stale lease ignored
    say(seen((0, valid(rec(seq=6))), (1, alive)), Observation(alive), 2)  # a replayed lease ignored
    released = valid(rec(released=True))
    say(seen((0, released)), Observation(released), 1)
    for to in ("S002", "S003"):
        handed = valid(rec(released=True, handoff=to))
        say(seen((0, handed)), Observation(handed), 1)  # to me; waiting for S003
        say(seen((0, handed)), Observation(handed), 11)  # not taken within
    handed = valid(rec(released=True, handoff="S003"))
    say(seen((0, handed)), Observation(handed, unheard={"S003": "beacons not heard for 2.5 s > 1.5 s"}), 1)
    say(seen((0, handed)), Observation(handed, unheard={"S003": "no member hears its beacons"}), 1)
    for gone in (GONE, SILENT):
        say(seen((0, alive)), Observation(alive, gone=("S001", 3, gone)), 1)  # early takeover
        for read in (missing, empty, unsigned, None, valid(rec(node="S004", epoch=4))):
            say(seen((0, alive)), Observation(read, gone=("S001", 3, gone)), 1)  # deferred
        older = valid(rec(epoch=2))  # a copy of an older epoch swapped in: no evidence either
        say(seen((0, alive), (0.5, older)), Observation(older, gone=("S001", 3, gone)), 1)
    for why in ("drained", "this agent is stopping", "priority 0 (never leader)", "relay not running",
                "relay status 4.2 s old > 3 s", "health check pending", "health command exited 2",
                "health command timed out (2 s)", "health URL answered 503",
                "heartbeat 12.0 s old > 10 + 2"):  # fmt: skip
        say(seen((0, alive)), Observation(alive, eligible=False, ineligible_why=why), 11)  # not eligible
        say(leader(), Observation(valid(rec(seq=5)), eligible=False, ineligible_why=why, successor="S002"), 1)
    say(seen((0, alive)), Observation(alive, paused=True), 11)
    say(seen((0, alive)), Observation(alive, sit_out_until=20), 11)
    say(leader(), Observation(valid(rec())), 8)  # deadline
    say(leader(), Observation(valid(rec(node="S002", epoch=4))), 1)  # lost
    say(leader(), Observation(None), 1)  # store unreachable, stepping down in
    say(leader(), Observation(released), 1)
    say(leader(), Observation(valid(rec()), serving_lapsed="no majority of 3 members within W 1.5 s: "
                              "no majority ever"), 1)  # fmt: skip
    say(leader(), Observation(valid(rec()), renewing=True), 1)
    say(leader(), Observation(valid(rec())), 1)
    for read in (missing, empty, unsigned):
        say(leader(), Observation(read), 1)  # rewriting own record
    say(leader(), Observation(valid(rec()), planned_handoff=("S002", "promote of S002 requested")), 1)
    # A real elector: elected, then renewed.
    store = MemoryLeaseStore()
    clock = FakeClock()
    (first, _) = elected_pool(store, clock, "S002")
    out.append(str(first.elector.last))
    clock.advance(3)
    out.append(str(first.cycle(renewing=True)))
    return out


def test_decide_s_decisions_are_said_in_zh_hant_with_no_english_left(dj):
    shown = {}
    for english in decided():
        said = zh(english)
        left = english_words(said)
        assert said != english and not left, f"{english!r} is shown as {said!r}"
        shown[english.partition(": ")[0]] = said
    assert set(shown) >= {"follow", "wait", "contend", "idle", "hold", "renew", "step_down", "hand_off"}


@pytest.mark.parametrize("text", ["wait: something another version wrote", "an old agent's words"])
def test_a_form_it_does_not_know_is_shown_as_written(dj, text):
    assert zh(text) == text
