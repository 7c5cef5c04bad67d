"""A share that hangs (a FUSE passthrough that stops answering, as an SMB server
can) is an unreachable share: the leader steps down by its deadline, every
agent's /healthz and panel keep answering within 1 s, nobody exits, and the
pool recovers when the share answers again (docs/design.md §5.3)."""

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from harness import ROOT, wait_until

pytestmark = pytest.mark.agents

DEADLINE = 2.0  # the fast profile's RENEW_DEADLINE
HANG_S = 20.0


def _mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as fh:
        return any(line.split()[1] == str(path) for line in fh)


@pytest.fixture
def faulty_share():
    """Mount a faulty FUSE passthrough over a site's share folder."""
    if not (os.path.exists("/dev/fuse") and shutil.which("fusermount3")):
        pytest.skip("needs /dev/fuse and fusermount3 (the bootstrap installs fuse3)")
    mounts = []

    def mount(site):  # type: ignore[no-untyped-def]
        share = site.lease_dir.parent
        backing = share.with_name("backing")
        share.rename(backing)
        share.mkdir()
        control = share.with_name("control")
        control.mkdir()
        log = open(share.with_name("faultyfs.log"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "faultyfs.py"), str(backing), str(share), str(control)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        mounts.append((share, control, proc, log))
        wait_until(lambda: _mounted(share) and (share / "socket").is_dir(), 10, "the FUSE share")
        return control

    yield mount
    for share, control, proc, log in mounts:
        for flag in ("hang", "eio"):
            (control / flag).unlink(missing_ok=True)
        subprocess.run(["fusermount3", "-u", "-z", str(share)], capture_output=True, timeout=10)
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _answers_fast(agent, path: str) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    try:
        with agent.urlopen(path) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:  # the panel redirects or asks for a login: an answer
        exc.read()
    return time.monotonic() - started


@pytest.mark.long
def test_a_hung_share_is_unreachable_and_the_agents_keep_answering(site_factory, faulty_share):
    site = site_factory(3)
    control = faulty_share(site)
    site.start()
    lease = site.wait_settled()
    leader = site.by_name(lease.node)
    urls = []
    for a in site.agents:
        urls += [(a, "/healthz"), (a, "/login/"), (a, "/")]
    (control / "hang").touch()
    hung_at = time.monotonic()
    slowest = 0.0
    stepped_down_after = None
    while time.monotonic() - hung_at < HANG_S:
        for agent, path in urls:
            slowest = max(slowest, _answers_fast(agent, path))
        if stepped_down_after is None and leader.state().get("leader") is False:
            stepped_down_after = time.monotonic() - hung_at
        assert all(a.alive() for a in site.agents)
        time.sleep(0.2)
    assert stepped_down_after is not None, "the leader never stepped down while the share hung"
    # The deadline, plus one share operation given up on, plus a cycle.
    assert stepped_down_after <= DEADLINE + 2.0 + 2.0, stepped_down_after
    assert slowest < 1.0, f"a page took {slowest:.2f} s while the share hung"
    assert not any(a.state().get("leader") for a in site.agents)
    (control / "hang").unlink()
    back = site.wait_leader(timeout=30, min_epoch=lease.epoch + 1)
    wait_until(
        lambda: [a.name for a in site.agents if a.state().get("leader")] == [back.node],
        15,
        "exactly the new lease holder to lead",
    )
    logs = "".join(a.log() for a in site.agents)
    assert "share did not answer within" in logs or "share not answering" in logs
    assert "Traceback" not in logs


@pytest.mark.parametrize("share_timeout", ["2", "6"])
def test_sigterm_stops_a_leader_within_5_s_while_its_share_hangs(site_factory, faulty_share, share_timeout):
    """docs/design.md §11: SIGTERM stops the agent within 5 s. Handing the lease over needs the
    share; a hung share makes that a bounded attempt (within SHARE_TIMEOUT and the stop's
    own budget, whichever ends first), never a wait; children stuck on it are killed."""
    site = site_factory(2, extra={"SHARE_TIMEOUT": share_timeout})
    control = faulty_share(site)
    site.start()
    lease = site.wait_settled()
    leader = site.by_name(lease.node)
    (control / "hang").touch()
    took = leader.terminate(timeout=15)
    assert took < 5.0, f"SIGTERM took {took:.2f} s with a hung share"
    log = leader.log()
    assert "stopped in" in log and "outlived SIGKILL" not in log
    (control / "hang").unlink()
    # The other agent takes over (after the TTL: the release could not be written).
    other = next(a for a in site.agents if a is not leader)
    site.wait_leader(timeout=40, min_epoch=lease.epoch + 1)
    assert other.alive()
