"""Three real agents whose lease dir is `smb://` on a real Samba server on
loopback (docs/design.md §5.3): no mount, the agents speak SMB themselves. The
test looks at the pool through the folder smbd serves."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from harness import ROOT, live_lease, read_lease, wait_until

from elections.core.lease import sign

pytestmark = pytest.mark.agents


@pytest.fixture
def smb_site(site_factory, samba_server, request):
    def make(n=3, timing=None, server=None, **kw):  # type: ignore[no-untyped-def]
        server = server or samba_server
        folder = f"site-{request.node.name[-30:]}-{time.monotonic_ns()}"
        options = server.site_options(folder)
        options["extra"] = {**options["extra"], **kw.pop("extra", {})}
        return site_factory(n, timing=timing, **options, **kw)

    return make


@pytest.mark.long
def test_over_smb_damage_crash_and_a_hung_file_server_leave_one_leader(smb_site, own_samba):
    """One site for all three (agents take long to start on a loaded machine):
    the lease-damage rules, a crash failover, a file server that hangs."""
    server = own_samba
    site = smb_site(3, server=server)  # TTL 3, renew 1, poll 0.5, deadline 2
    site.start()
    lease = site.wait_settled(timeout=60)
    wait_until(lambda: sum(a.state().get("leader") is True for a in site.agents) == 1, 15, "one leader")

    # A damaged or forged lease while the leader lives: no evidence, rewritten, no new epoch.
    path = site.lease_dir / "relay_leader.json"
    good = json.loads(path.read_bytes())
    forged = {k: v for k, v in good.items() if k != "sig"}
    forged.update(node="S003" if lease.node != "S003" else "S002", ip="127.0.0.99", epoch=lease.epoch + 50)
    forged["sig"] = sign(forged, "not-the-site-token")
    damages = {
        "truncated": path.read_bytes()[:40],
        "oversized": b"{" + b" " * (1 << 20) + b"}",
        "forged": json.dumps(forged).encode(),
    }
    for what, data in damages.items():
        with open(path, "wb") as fh:  # in place, on the server's disk, as a careless tool would
            fh.write(data)
        assert read_lease(site.lease_dir).status in ("corrupt", "forged"), what
        back = wait_until(lambda: live_lease(site.lease_dir), 8, f"the leader to rewrite a {what} lease")
        assert (back.node, back.epoch) == (lease.node, lease.epoch), what
    assert [a.name for a in site.agents if a.state().get("leader")] == [lease.node]

    # kill -9 right after a renewal is seen: the worst case for the followers' timers.
    first = site.lease()
    leader = site.by_name(first.node)
    wait_until(lambda: (site.lease() or first).renew_seq > first.renew_seq, 10, "a renewal over SMB")
    leader.kill9()
    killed_at = time.monotonic()
    new = site.wait_leader(timeout=30, other_than=first.node)
    took = time.monotonic() - killed_at
    assert new.epoch == first.epoch + 1
    assert took <= 3 + 3, f"failover over SMB took {took:.1f} s > LEASE_TTL + 3 s"
    assert all(a.alive() for a in site.agents if a is not leader)
    logs = "".join(a.log() for a in site.agents)
    assert "SECURITY: ignoring forged lease" in logs
    assert "Traceback" not in logs
    # The same files as on a mounted share.
    wait_until(lambda: (site.lease_dir / "members" / f"{new.node}.json").exists(), 5, "the member file")
    wait_until(lambda: (site.lease_dir / "events" / f"{new.node}.jsonl").exists(), 10, "the event log")

    # The file server stops answering (SIGSTOP) for 2 x TTL: the leader cannot
    # renew and steps down at its deadline; nobody can take over meanwhile.
    # After SIGCONT the pool has one leader again.
    living = [a for a in site.agents if a is not leader]  # the killed one's state file still says leader
    server.pause()
    try:
        stopped_at = time.monotonic()
        wait_until(lambda: not any(a.state().get("leader") for a in living), 2 + 5,
                   "the leader to step down while the share hangs")  # fmt: skip
        time.sleep(max(0.0, stopped_at + 2 * 3 - time.monotonic()))
        assert not any(a.state().get("leader") for a in living)
    finally:
        server.resume()
    frozen = site.lease()

    def renewed():  # type: ignore[no-untyped-def]
        now = site.lease()
        moved = frozen is None or (now and (now.node, now.epoch, now.renew_seq) != (
            frozen.node, frozen.epoch, frozen.renew_seq))  # fmt: skip
        return now if now and moved else None

    again = wait_until(renewed, 20, "a lease written again after SIGCONT")
    wait_until(lambda: sum(a.state().get("leader") is True for a in living) == 1, 20,
               "exactly one leader after SIGCONT")  # fmt: skip
    assert again.epoch >= new.epoch

    # relayctl doctor probes the share through SMB too; no password in any log.
    from samba import PASSWORD

    winner = site.by_name(new.node)
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", "doctor", "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "STK_INI": str(winner.ini)})  # fmt: skip
    checks = {c["check"]: c for c in json.loads(out.stdout)}
    probe = checks["lease dir reachable and writable"]
    assert probe["ok"] and probe["detail"].startswith("smb://"), probe
    assert checks["lease signature"]["ok"], checks["lease signature"]
    assert PASSWORD not in logs + out.stdout + out.stderr
