"""The station door's /metrics families (`stkrelay_door_*`, elections/web/metrics.py): a real door
on loopback sockets refuses, forwards, follows a leader change and refuses again, and the scrape
of the door.json it wrote carries each of those counts; `promtool check metrics` passes them."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
import time
from pathlib import Path

import test_panel_support
from harness import free_pair
from test_entry import relay, view
from test_metrics import samples, scrape
from test_panel_support import write_pool
from test_proxy import closed, until
from test_station_door import refused_within

from elections.ports.local.localstate import LocalState
from relay.server.station_door import StationDoor

dj = test_panel_support.dj
PROMTOOL = shutil.which("promtool")


def run_a_door(data_dir: Path) -> None:
    """A door on 127.0.0.1 through no view, a leader (epoch 7), a new one (epoch 8) and a released
    lease; its status is written while it still listens, and it is stopped without a last write
    (the scrape reads what a live door said)."""
    port = free_pair("127.0.0.1")
    (data_dir / "pool.json").unlink(missing_ok=True)  # no view yet: the first dial is refused as no_view

    async def main() -> None:
        local = LocalState(data_dir)
        a, port_a = await relay(b"S002")
        b, port_b = await relay(b"S003")
        door = StationDoor(str(data_dir), "S001", ("127.0.0.1",), port, stale_after=5.0)  # never stale here
        task = asyncio.ensure_future(door.run())
        await until(lambda: door.proxy.listening)
        await asyncio.to_thread(refused_within, "127.0.0.1", port)  # no pool view yet: no_view
        local.write_pool(view(7, "S002", port_a))
        await until(lambda: door.gate.target is not None)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"S002"
        writer.write(b"x" * 1000)
        assert await asyncio.wait_for(reader.readexactly(1000), 5) == b"x" * 1000
        local.write_pool(view(8, "S003", port_b))  # a new leader: the pair to S002 is closed
        assert await closed(reader)
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # to S003, kept open
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"S003"
        door.write_status()
        doc = local.door()
        assert doc.target is not None and doc.target["epoch"] == 8 and doc.sessions == 1
        local.write_pool(view(8, "S003", port_b, released=True, ttl_s=0))  # no one to lead to
        assert await closed(reader)
        await until(lambda: door.gate.target is None)
        await asyncio.to_thread(refused_within, "127.0.0.1", port)  # released
        door.write_status()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        door.proxy.lose_leadership()  # its sockets: the status file stays as the live door wrote it
        for server in (a, b):
            server.close()

    asyncio.run(main())
    write_pool(data_dir, leader="S003", epoch=8, released=True)  # the panel's own view of that pool


def test_a_real_doors_counters_move_in_the_metrics(dj, monkeypatch):
    from django.conf import settings

    k = ("kmsn", settings.STK.kmsn)
    # A NODE_IP off loopback: this agent has a door (on a test machine's loopback NODE_IP it has none).
    monkeypatch.setattr(settings, "STK", dataclasses.replace(settings.STK, node_ip="10.0.0.1"))
    _, families = scrape()
    assert samples(families, "stkrelay_door_up") == {(k,): 0}  # no door.json yet: it does not report
    assert samples(families, "stkrelay_door_accepted_total") == {}

    run_a_door(dj["data_dir"])
    _, families = scrape()
    assert samples(families, "stkrelay_door_up") == {(k,): 1}
    assert samples(families, "stkrelay_door_accepted_total") == {(k,): 2}
    refused = samples(families, "stkrelay_door_refused_total")
    assert refused == {(k, ("reason", "no_view")): 1, (k, ("reason", "released")): 1}, refused
    closed_by = samples(families, "stkrelay_door_closed_total")
    assert closed_by[(("cause", "repointed"), k)] == 1  # the pair to S002, at the leader change
    assert closed_by[(("cause", "no_leader"), k)] == 1  # the session to S003, at the release
    assert samples(families, "stkrelay_door_leader_changes_total") == {(k,): 1}
    moved = samples(families, "stkrelay_door_bytes_total")
    assert moved[(("direction", "up"), k)] >= 1000 and moved[(("direction", "down"), k)] >= 1000 + 8
    assert samples(families, "stkrelay_door_connections") == {(k, ("port", "json")): 0,
                                                              (k, ("port", "passthrough")): 0}  # fmt: skip
    assert samples(families, "stkrelay_door_target_epoch") == {}  # released: it leads nowhere now
    kinds = {f.name: f.type for f in families.values() if f.name.startswith("stkrelay_door_")}
    assert kinds == {
        "stkrelay_door_up": "gauge", "stkrelay_door_target_epoch": "gauge",
        "stkrelay_door_connections": "gauge", "stkrelay_door_accepted": "counter",
        "stkrelay_door_refused": "counter", "stkrelay_door_closed": "counter",
        "stkrelay_door_leader_changes": "counter", "stkrelay_door_bytes": "counter",
    }  # fmt: skip


def test_a_door_that_leads_somewhere_shows_its_epoch_and_open_connections(dj, monkeypatch):
    from django.conf import settings

    from elections.ports.local.relay_files import EntryStatus

    k = ("kmsn", settings.STK.kmsn)
    monkeypatch.setattr(settings, "STK", dataclasses.replace(settings.STK, node_ip="10.0.0.1"))
    proxy = {"kind": "exec", "accepted": 5, "refused": {"stale_view": 3}, "closed": {}, "bytes_up": 9,
             "bytes_down": 11}  # fmt: skip
    status = EntryStatus(pid=os.getpid(), listen="127.0.0.1:9530", listening=True, updated=time.monotonic(),
                         target={"node": "S002", "ip": "127.0.0.22", "port": 9530, "epoch": 12},
                         sessions=3, streams=1, proxy=proxy)  # fmt: skip
    LocalState(dj["data_dir"]).write_door(status)
    _, families = scrape()
    assert samples(families, "stkrelay_door_target_epoch") == {(k,): 12}
    assert samples(families, "stkrelay_door_connections") == {(k, ("port", "json")): 3,
                                                              (k, ("port", "passthrough")): 1}  # fmt: skip
    assert samples(families, "stkrelay_door_refused_total") == {(k, ("reason", "stale_view")): 3}


def test_promtool_passes_the_door_families(dj, monkeypatch):
    from django.conf import settings

    assert PROMTOOL, "promtool is missing: run scripts/bootstrap.sh (Debian's prometheus package)"
    monkeypatch.setattr(settings, "STK", dataclasses.replace(settings.STK, node_ip="10.0.0.1"))
    run_a_door(dj["data_dir"])
    response, families = scrape()
    assert "stkrelay_door_refused" in families
    text = response.content.decode()
    door = "".join(line + "\n" for line in text.splitlines() if "stkrelay_door_" in line)
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=door, capture_output=True, text=True,
                             timeout=60)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "" and checked.stderr.strip() == "", checked.stdout + checked.stderr
