"""The gate of ADR 0011 (`elections.core.gate`, `elections.ports.local.gate`): a real file,
a real command, a real FUSE view that fails or hangs. Anything but a fresh MASTER is
not master, with the reason; a hostile gate file (huge, a FIFO, a link, a folder) is
refused without a stall; a command past its deadline is killed, children too."""

import os
import shutil
import sys
import textwrap
import threading
import time

import pytest
from faultyfs import FaultyMount
from harness import wait_until

from elections.core.eligibility import Freshness, judge, observe
from elections.core.gate import MASTER_SIGNAL, PENDING, GateMemory, Look, gate_of, remember, signal
from elections.ports.local.gate import CommandGate, FileGate
from elections.runtime.health import HealthMonitor


def one_look(gate, max_age=0.0, memory=None, now=100.0):
    look = gate.look()
    memory = remember(memory or GateMemory(), look, now)
    return signal(look, memory, now, max_age)


def timed(fn):
    started = time.monotonic()
    out = fn()
    return out, time.monotonic() - started


@pytest.mark.parametrize(
    "content, expected",
    [
        ("MASTER\n", MASTER_SIGNAL),
        ("master", MASTER_SIGNAL),
        ("  MASTER  extra words\n", MASTER_SIGNAL),
        ("BACKUP\n", "gate says BACKUP"),
        ("FAULT\n", "gate says FAULT"),
        ("STOP\n", "gate says STOP"),
        ("", "gate says empty"),
        ("MASTERFUL\n", "gate says 'MASTERFUL'"),
        ("\x1b[2J\x07BEEP", "gate says '\\x1b[2J\\x07BEEP'"),  # escaped, never raw
    ],
)
def test_only_a_master_word_is_master_and_every_other_content_is_named(tmp_path, content, expected):
    path = tmp_path / "gate"
    path.write_text(content)
    assert one_look(FileGate(str(path), 1.0)) == expected


def test_a_missing_file_a_folder_a_link_and_a_fifo_are_not_master_and_never_stall(tmp_path):
    real = tmp_path / "real"
    real.write_text("MASTER\n")
    missing = tmp_path / "missing"
    folder = tmp_path / "folder"
    folder.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)  # someone else's MASTER must not become ours
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # a blocking open would hang the health thread for good
    for path, why in [(missing, "does not exist"), (folder, "refused"), (link, "refused: link is a link"),
                      (fifo, "not a regular file")]:  # fmt: skip
        out, took = timed(lambda p=path: one_look(FileGate(str(p), 1.0)))
        assert out != MASTER_SIGNAL and why in out, out
        assert took < 0.5, f"{path.name}: {took:.2f} s"


def test_a_huge_gate_file_is_refused_after_reading_its_bound_only(tmp_path):
    path = tmp_path / "gate"
    with open(path, "wb") as fh:
        fh.write(b"MASTER" + b" " * (64 << 20))  # 64 MiB: read whole it would cost a second and the memory
    out, took = timed(lambda: one_look(FileGate(str(path), 1.0)))
    assert out.startswith("gate file refused:") and "larger than 64 bytes" in out
    assert took < 0.5


def test_gate_max_age_a_file_that_stops_changing_stops_being_master(tmp_path):
    path = tmp_path / "gate"
    path.write_text("MASTER 1\n")
    gate, memory = FileGate(str(path), 1.0), GateMemory()
    for now, content in [(100.0, "MASTER 1\n"), (102.0, "MASTER 2\n"), (104.0, "MASTER 3\n")]:
        path.write_text(content)
        look = gate.look()
        memory = remember(memory, look, now)
        assert signal(look, memory, now, max_age=3.0) == MASTER_SIGNAL
    look = gate.look()  # the writer stopped: the same file, looked at later
    memory = remember(memory, look, 106.9)
    assert signal(look, memory, 106.9, max_age=3.0) == MASTER_SIGNAL
    out = signal(look, remember(memory, look, 107.5), 107.5, max_age=3.0)
    assert out == "gate file unchanged for 3.5 s > GATE_MAX_AGE 3 s"
    assert signal(look, memory, 107.5, max_age=0.0) == MASTER_SIGNAL  # without GATE_MAX_AGE: fresh when read


def test_gate_max_age_times_a_stale_file_at_the_first_look_from_its_mtime(tmp_path):
    path = tmp_path / "gate"
    path.write_text("MASTER\n")
    old = time.time() - 60
    os.utime(path, (old, old))  # left behind by a writer that died a minute ago
    assert "unchanged for 6" in one_look(FileGate(str(path), 1.0), max_age=5.0)


@pytest.fixture
def faulty(tmp_path):
    if not (os.path.exists("/dev/fuse") and shutil.which("fusermount3")):
        pytest.fail("needs /dev/fuse and fusermount3 (the bootstrap installs fuse3)")
    (tmp_path / "backing").mkdir()
    mount = FaultyMount(tmp_path / "backing", tmp_path / "view", tmp_path / "control", tmp_path / "fs.log")
    mount.start()
    yield mount
    mount.flag("hang", False)
    mount.stop()


def test_a_gate_file_that_cannot_be_read_is_not_master(faulty):
    path = faulty.mountpoint / "gate"
    path.write_text("MASTER\n")
    gate = FileGate(str(path), 1.0)
    assert one_look(gate) == MASTER_SIGNAL
    faulty.flag("eio")
    assert one_look(gate).startswith("gate file unreadable")
    faulty.flag("eio", False)
    assert one_look(gate) == MASTER_SIGNAL


def test_a_gate_file_read_that_hangs_is_not_master_within_its_deadline_and_starts_no_second_read(faulty):
    path = faulty.mountpoint / "gate"
    path.write_text("MASTER\n")
    gate = FileGate(str(path), 0.5)
    faulty.flag("hang")
    out, took = timed(lambda: one_look(gate))
    assert out == "gate file read timed out (0.5 s)" and took < 1.0
    out, took = timed(lambda: one_look(gate))
    assert out.startswith("gate file read stuck") and took < 0.1
    faulty.flag("hang", False)
    assert wait_until(lambda: one_look(gate) == MASTER_SIGNAL, 10, "the gate read again after the hang")


def test_a_gate_command_exit_0_is_master_anything_else_names_itself(tmp_path):
    assert one_look(CommandGate(("true",), 1.0)) == MASTER_SIGNAL
    assert one_look(CommandGate(("sh", "-c", "exit 3"), 1.0)) == "gate command exited 3"
    assert one_look(CommandGate((str(tmp_path / "gone"),), 1.0)).startswith("gate command cannot start")
    # no shell: a word with shell syntax is one argument, never run
    marker = tmp_path / "ran"
    assert one_look(CommandGate(("echo", f"; touch {marker}"), 1.0)) == MASTER_SIGNAL
    assert not marker.exists()


def test_a_gate_command_past_its_deadline_is_not_master_and_its_whole_group_is_killed(tmp_path):
    pids = tmp_path / "pids"
    script = tmp_path / "slow.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(60)
    """)
    )
    out, took = timed(lambda: one_look(CommandGate((sys.executable, str(script)), 0.8)))
    assert out == "gate command timed out (0.8 s)"
    assert took < 2.5
    for pid in map(int, pids.read_text().split()):
        wait_until(lambda p=pid: not os.path.exists(f"/proc/{p}") or _zombie(p), 5, f"pid {pid} killed")


def _zombie(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_monitor_is_not_master_before_its_first_look_and_reports_each_change_once(tmp_path):
    path = tmp_path / "gate"
    path.write_text("BACKUP\n")
    seen = []
    mon = HealthMonitor(None, gate=FileGate(str(path), 1.0))
    mon.on_gate = seen.append
    assert mon.gate() == PENDING and mon.status() == "ok"
    mon.look_at_gate()
    path.write_text("MASTER\n")
    mon.look_at_gate()
    mon.look_at_gate()
    path.unlink()
    mon.look_at_gate()
    assert seen == ["gate says BACKUP", MASTER_SIGNAL, "gate file gate does not exist"]
    assert HealthMonitor(None).gate() is None  # no gate configured: no condition


def test_the_monitor_thread_looks_at_the_gate_every_interval(tmp_path):
    path = tmp_path / "gate"
    path.write_text("MASTER\n")
    mon = HealthMonitor(None, interval=0.1, gate=FileGate(str(path), 1.0)).start()
    try:
        wait_until(lambda: mon.gate() == MASTER_SIGNAL, 5, "master")
        path.write_text("FAULT\n")
        wait_until(lambda: mon.gate() == "gate says FAULT", 5, "fault")
    finally:
        mon.stop()


def test_a_judge_counts_a_member_whose_heartbeat_gate_is_not_master_ineligible_with_its_reason():
    fresh = observe(Freshness(), 1, now=0.0)
    beat = {"node": "S002", "seq": 1, "health": "ok"}
    assert judge("S002", beat, fresh, 1.0, 10, 5, gate_of(beat)).eligible  # no gate configured
    assert judge("S002", {**beat, "gate": "master"}, fresh, 1.0, 10, 5, gate_of({"gate": "master"})).eligible
    v = judge("S002", beat, fresh, 1.0, 10, 5, gate_of({"gate": "gate says BACKUP"}))
    assert v.reasons == ("gate: gate says BACKUP",)
    hostile = {"gate": {"nested": ["x" * 10_000]}}
    v = judge("S002", beat, fresh, 1.0, 10, 5, gate_of(hostile))
    assert v.reasons == ("gate: gate field unreadable",)
    long = gate_of({"gate": "\n" + "y" * 10_000})
    assert len(long) == 120 and "\n" not in long


def test_a_look_that_was_not_a_read_never_restarts_the_change_timer():
    memory = remember(GateMemory(), Look(True, "MASTER", stamp=1, age_at_look=0.0), 10.0)
    assert remember(memory, Look(False, why="x"), 20.0) == memory
    assert remember(memory, Look(True, "MASTER", stamp=1), 20.0) == memory
    assert remember(memory, Look(True, "MASTER", stamp=2), 20.0).changed_at == 20.0


def test_a_health_check_that_hangs_never_delays_a_look_at_the_gate(tmp_path):
    path = tmp_path / "gate"
    path.write_text("MASTER\n")
    release = threading.Event()
    mon = HealthMonitor(lambda: "ok" if release.wait(30) else "late", interval=0.1,
                        gate=FileGate(str(path), 1.0)).start()  # fmt: skip
    try:
        wait_until(lambda: mon.gate() == MASTER_SIGNAL, 2, "the gate looked at while the check hangs")
        path.write_text("BACKUP\n")
        wait_until(lambda: mon.gate() == "gate says BACKUP", 2, "the next look too")
        assert mon.status() == "health check pending"
    finally:
        release.set()
        mon.stop()
