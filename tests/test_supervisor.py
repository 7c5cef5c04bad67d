"""The supervisor with real children: it never waits on one, and nothing a
child does (ignore SIGTERM, fail to start) ends it — its end would take every
child of the agent with it (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import io
import os
import sys
import textwrap
import threading
import time
from pathlib import Path

from harness import wait_until

from elections.ports.local.localstate import Leadership, LocalState, RelayStatus
from elections.runtime.supervisor import SUPERVISE_EVERY, ChildSpec, Supervisor

ROOT = Path(__file__).resolve().parent.parent

# A standby relay that says it serves and will not stop on SIGTERM.
STUBBORN = textwrap.dedent(
    """
    import signal, sys, time, os
    from elections.ports.local.localstate import LocalState, RelayStatus
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    status = RelayStatus(pid=os.getpid(), listening=True, updated=time.monotonic())
    LocalState(sys.argv[1]).write_relay(status)
    print("serving", flush=True)
    while True:
        time.sleep(0.05)
    """
)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_a_standby_child_that_ignores_sigterm_is_killed_without_the_supervisor_waiting(tmp_path):
    out = io.StringIO()
    spec = ChildSpec("relay", [sys.executable, "-c", STUBBORN, str(tmp_path)], standby=True)
    sup = Supervisor([spec], str(tmp_path), env(), lambda s: True, out=out)
    child = sup.children[0]
    slowest = 0.0

    def step() -> bool:
        nonlocal slowest
        started = time.monotonic()
        sup.step(time.monotonic())
        slowest = max(slowest, time.monotonic() - started)
        return False

    sup.step(time.monotonic())
    first = child.proc
    assert first is not None
    # Not leader (no leadership.json), yet it says it serves: SIGTERM after 1 s,
    # which it ignores; SIGKILL a second later; then a new standby at once.
    wait_until(lambda: step() or "did not stop in" in out.getvalue(), 15, "the SIGKILL")
    wait_until(lambda: step() or (child.proc is not None and child.proc is not first), 15, "a new standby")
    assert first.returncode == -9
    assert "still serves without leadership: stopping it" in out.getvalue()
    assert "restart in" not in out.getvalue()  # stopped by the supervisor: re-armed, no backoff
    assert child.failures == 0
    assert slowest < 0.5, f"a supervision pass took {slowest:.2f} s: it waited on a child"
    sup.stopping.set()
    assert sup.shutdown() == 0
    assert child.proc is not None and child.proc.poll() is not None


# A worker that writes one line to a file as SIGTERM stops it: its last row of the epoch.
LAST_WORDS = textwrap.dedent(
    """
    import signal, sys, time
    def stop(*_):
        open(sys.argv[1], "a").write("worker's last row\\n")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    print("working", flush=True)
    while True:
        time.sleep(0.05)
    """
)


def test_the_release_on_shutdown_is_written_at_once_and_its_history_row_after_the_worker(tmp_path):
    """The lease is handed over before any child is stopped; the `released` row waits for the
    children: a worker stopped a moment after an election may still be writing that epoch's
    `elected` row (its leadership state comes first), and the history must not say `released`
    before `elected` (a CI run: SIGTERM 50 ms after an election)."""
    rows = tmp_path / "rows"
    spec = ChildSpec("worker", [sys.executable, "-c", LAST_WORDS, str(rows)])
    order: list[str] = []

    def release(state: Leadership) -> bool:
        order.append(f"lease released, epoch {state.epoch}, worker running: {child.running}")
        return True

    def record(state: Leadership) -> None:
        order.extend(rows.read_text().splitlines())
        order.append(f"released row, epoch {state.epoch}")

    out = io.StringIO()
    sup = Supervisor([spec], str(tmp_path), env(), release, out=out, record_release=record)
    child = sup.children[0]
    sup.step(time.monotonic())
    wait_until(lambda: "working" in out.getvalue(), 10, "the worker's handler")
    LocalState(tmp_path).write_leadership(
        Leadership(node="S001", pid=os.getpid(), leader=True, epoch=3, valid_until=time.monotonic() + 60)
    )
    sup.stopping.set()
    assert sup.shutdown() == 0
    expected = ["lease released, epoch 3, worker running: True", "worker's last row", "released row, epoch 3"]
    assert order == expected, out.getvalue()


def test_a_release_not_written_on_shutdown_writes_no_history_row(tmp_path):
    recorded: list[int | None] = []
    sup = Supervisor([], str(tmp_path), env(), lambda s: False, out=io.StringIO(),
                     record_release=lambda s: recorded.append(s.epoch))  # fmt: skip
    LocalState(tmp_path).write_leadership(
        Leadership(node="S001", pid=os.getpid(), leader=True, epoch=3, valid_until=time.monotonic() + 60)
    )
    sup.stopping.set()
    assert sup.shutdown() == 0
    assert recorded == []
    assert not LocalState(tmp_path).leadership().leader


def test_a_child_that_cannot_start_backs_off_and_the_others_run(tmp_path):
    out = io.StringIO()
    missing = ChildSpec("web", [str(tmp_path / "no-such-binary")])
    fine = ChildSpec("worker", [sys.executable, "-c", "import time; time.sleep(60)"])
    sup = Supervisor([missing, fine], str(tmp_path), env(), lambda s: True, out=out)
    now = time.monotonic()
    sup.step(now)
    sup.step(now + 0.1)  # within the backoff: not tried again
    assert out.getvalue().count("could not start web") == 1
    assert sup.children[0].proc is None and sup.children[0].failures == 1
    assert sup.children[1].running
    sup.step(now + 5)
    assert out.getvalue().count("could not start web") == 2
    assert sup.shutdown() == 0


def test_a_failing_supervision_pass_does_not_end_the_supervisor(tmp_path, monkeypatch):
    out = io.StringIO()
    sup = Supervisor([], str(tmp_path), env(), lambda s: True, out=out, tick=0.02)
    passes = []

    def broken(now: float) -> None:
        passes.append(now)
        raise RuntimeError("a bug in one pass")

    monkeypatch.setattr(sup, "step", broken)
    stopper = threading.Thread(
        target=lambda: (wait_until(lambda: len(passes) >= 3, 10, "three passes"), sup.stop()),
        daemon=True,
    )
    stopper.start()
    assert sup.run() == 0  # run() installs signal handlers: it must run on the main thread
    stopper.join(5)
    assert len(passes) >= 3
    assert "supervision pass failed; going on" in out.getvalue()
    assert (
        out.getvalue().count("RuntimeError: a bug in one pass") == 1
    )  # the same failure: said once a minute


def test_an_idle_supervisor_passes_on_the_relays_change_not_ten_times_a_second(tmp_path, monkeypatch):
    sup = Supervisor([], str(tmp_path), env(), lambda s: True, out=io.StringIO(), tick=0.1)
    passes: list[float] = []
    monkeypatch.setattr(sup, "step", lambda now: passes.append(time.monotonic()))
    results: dict[str, object] = {}

    def drive() -> None:
        started = time.monotonic()
        time.sleep(2.0)  # the idle window being measured, not a wait for something
        results["idle"] = sum(1 for t in passes if t >= started)
        written = time.monotonic()
        relay = RelayStatus(pid=os.getpid(), epoch=3, listening=True, updated=written)
        LocalState(tmp_path).write_relay(relay)
        wait_until(lambda: any(t > written for t in passes), 5, "a pass after the relay's write")
        results["woken_after"] = min(t for t in passes if t > written) - written
        # The worker's leadership.json is looked at by the passes that come anyway: a leader's
        # worker replaces it at every move of its gate (issue 41).
        seen = len(passes)
        wait_until(lambda: len(passes) > seen, 5, "a pass")  # the next one by the clock: SUPERVISE_EVERY on
        moved = time.monotonic()
        LocalState(tmp_path).write_leadership(Leadership(node="S001", pid=os.getpid()))
        time.sleep(SUPERVISE_EVERY / 2)  # the window being measured: no pass woken by that write
        results["woken_by_leadership"] = sum(1 for t in passes if t > moved)
        sup.stop()

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    assert sup.run() == 0
    driver.join(10)
    assert results["idle"] <= 2.0 / SUPERVISE_EVERY + 2, results  # 20 when it ticked every 0.1 s
    assert results["woken_after"] < SUPERVISE_EVERY / 2, results  # woken by the change, not the timeout
    assert results["woken_by_leadership"] == 0, results


def test_a_childs_output_is_passed_on_one_escaped_line_at_a_time(tmp_path):
    out = io.StringIO()
    said = "\\x1b]0;owned\\x07\\u202eexe\\rFAKE ok\\nsecond\\n"
    code = f"import sys; sys.stdout.write('{said}'); sys.stdout.flush()"
    chatty = ChildSpec("relay", [sys.executable, "-c", code + "; import time; time.sleep(60)"])
    sup = Supervisor([chatty], str(tmp_path), env(), lambda s: True, out=out)
    sup.step(time.monotonic())
    wait_until(lambda: "[relay] second" in out.getvalue(), 15, "the child's lines")
    assert "[relay] \\u001b]0;owned\\u0007\\u202eexe\\u000dFAKE ok\n" in out.getvalue()
    assert sup.shutdown() == 0
