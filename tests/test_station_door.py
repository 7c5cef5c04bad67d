"""The station door (issue 36, relay/server/station_door.py): where it listens, and the door itself
on real loopback sockets following pool.json as the worker writes it — forwarding to the leader's
relay, refusing at once without one, and giving `NODE_IP` up to this member's own relay while it
leads (``RELAY_FORWARD = lan``). The whole site, with old stations in network namespaces, is
tests/test_netns_stations.py."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import time
from pathlib import Path

import test_panel_support
from harness import free_pair
from test_entry import relay, view
from test_proxy import closed, until

from elections.ports.local.localstate import LocalState
from elections.ports.local.pool_view import PoolView
from elections.ports.local.relay_files import EntryStatus
from elections.web.panel.door_state import door_check
from relay.server.listen_set import door_hosts, relay_loopback, wanted
from relay.server.station_door import StationDoor
from stkrelay import config

dj = test_panel_support.dj
BASE = {"STK_KMSN": "k", "STK_STATION": "S001", "STK_RELAY_TOKEN": "door-test-token-7f3a9c21d4e8b605",
        "STK_NODE_IP": "10.0.0.1"}  # fmt: skip


def test_where_the_door_listens_and_the_relay_leaves_loopback_to_it():
    assert door_hosts("10.0.0.1", "auto", "loopback") == ("127.0.0.1",)
    assert door_hosts("10.0.0.1", "auto", "lan") == ("127.0.0.1", "10.0.0.1")
    assert door_hosts("10.0.0.1", "off", "lan") == ("10.0.0.1",)  # RELAY_LOOPBACK off: NODE_IP only
    assert door_hosts("10.0.0.1", "auto", "off") == ()
    assert door_hosts("127.0.0.5", "auto", "lan") == ()  # agents sharing one loopback: no door
    assert door_hosts("0.0.0.0", "on", "lan") == ()  # a wildcard relay listens everywhere itself
    # The relay takes 127.0.0.1 only where no door does: the port is bound through every change of role.
    assert relay_loopback("10.0.0.1", "auto", "loopback") == "off"
    assert relay_loopback("10.0.0.1", "auto", "off") == "auto"
    hosts = [a.host for a in wanted("10.0.0.1", relay_loopback("10.0.0.1", "on", "lan"), [], 3)]
    assert hosts == ["10.0.0.1"]
    hosts = [a.host for a in wanted("10.0.0.1", relay_loopback("10.0.0.1", "on", "off"), [], 3)]
    assert hosts == ["10.0.0.1", "127.0.0.1"]


def test_relay_forward_is_checked():
    def load(**keys: str):  # type: ignore[no-untyped-def]
        return config.load(env={**BASE, **{f"STK_{k}": v for k, v in keys.items()}}, check_dirs=False)

    assert load().relay_forward == "loopback" and load(RELAY_FORWARD="LAN").relay_forward == "lan"
    assert load(RELAY_FORWARD="0").relay_forward == "off"
    assert [p.id for p in load(RELAY_FORWARD="everywhere").problems] == ["stkrelay.E091"]


def refused_within(host: str, port: int) -> float:
    """Seconds from the dial to the door's close (or the kernel's refusal)."""
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.settimeout(2)
            assert sock.recv(1) == b""
    except ConnectionError:
        pass
    return time.monotonic() - start


def test_the_door_forwards_to_the_leader_gives_node_ip_to_its_own_relay_and_refuses_at_once(tmp_path: Path):
    loopback, lan = "127.0.0.71", "127.0.0.72"  # this member's loopback and NODE_IP, as stand-ins
    port = free_pair(loopback, lan)

    async def main() -> None:
        local = LocalState(tmp_path)
        a, port_a = await relay(b"S002")
        door = StationDoor(str(tmp_path), "S001", (loopback, lan), port, stale_after=1.0, lan_host=lan)
        task = asyncio.ensure_future(door.run())
        await until(lambda: door.proxy.listening)
        # No leader read yet: every door refuses at once (closed, not a black hole).
        took = await asyncio.to_thread(refused_within, loopback, port)
        assert took < 0.05, f"{took * 1000:.1f} ms"
        assert lan not in door.proxy.listening_on  # nobody leads: NODE_IP is left for this member's relay
        local.write_pool(view(7, "S002", port_a))  # S002 leads: both doors lead to its relay
        await until(lambda: lan in door.proxy.listening_on)
        for host in (loopback, lan):
            reader, writer = await asyncio.open_connection(host, port)
            assert await asyncio.wait_for(reader.readexactly(4), 5) == b"S002"
            writer.write(b"ping")
            assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        # This member wins (its lease names it): NODE_IP is given up to its relay at once, and the
        # connections to the old leader are closed; loopback stays bound and leads to its own relay.
        ours, port_ours = await relay(b"S001")
        local.write_pool(view(8, "S001", port_ours))
        assert await closed(reader)
        await until(lambda: lan not in door.proxy.listening_on)
        reader, _ = await asyncio.open_connection(loopback, port)
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"S001"
        local.write_pool(view(9, "S002", port_a))  # and back: another member leads again
        await until(lambda: lan in door.proxy.listening_on)
        local.write_pool(view(9, "S002", port_a, released=True, ttl_s=0))
        assert await closed(reader)
        await until(lambda: door.gate.target is None)
        took = await asyncio.to_thread(refused_within, loopback, port)
        assert took < 0.05, f"{took * 1000:.1f} ms"
        door.write_status()
        status = local.door()
        assert status.listening and status.target is None and status.repointed >= 2
        door._stop.set()
        assert await asyncio.wait_for(task, 5) == 0
        for server in (a, ours):
            server.close()

    asyncio.run(main())


def test_doctor_says_where_this_pcs_stations_go(dj):
    now = time.monotonic()
    base = EntryStatus(pid=os.getpid(), listen="127.0.0.1:9530", listening=True, updated=now)
    name, ok, detail = door_check(base, now, leader=None)
    assert (name, ok) == ("station door", True) and "refused at once" in detail
    assert door_check(base, now, leader="S002")[1] is False  # a leader it does not follow
    target = {"node": "S002", "ip": "10.0.0.2", "port": 9530, "epoch": 7}
    ok, detail = door_check(dataclasses.replace(base, target=target, sessions=3), now, "S002")[1:]
    assert ok and "leading stations to S002 (10.0.0.2:9530, epoch 7)" in detail and "connections 3" in detail
    assert door_check(dataclasses.replace(base, updated=now - 10), now, "S002")[1] is False  # not reporting
    assert door_check(dataclasses.replace(base, listening=False, error="in use"), now, None)[1] is False


def test_the_site_page_says_where_this_pcs_door_leads_and_warns_when_it_is_silent(dj, monkeypatch):
    from django.conf import settings
    from test_panel_support import KMSN, client_for, make_user, member, write_pool

    write_pool(dj["data_dir"], leader="S002", members={"S001": member(ip="127.0.0.21"),
                                                       "S002": member(ip="127.0.0.22")})  # fmt: skip
    user = make_user("dora")
    page = client_for(user).get(f"/sites/{KMSN}/").content.decode()
    assert 'id="door-here"' not in page  # NODE_IP on loopback (a test machine): no door, none shown
    monkeypatch.setattr(settings, "STK", dataclasses.replace(settings.STK, node_ip="10.0.0.1"))
    local = LocalState(dj["data_dir"])
    status = EntryStatus(pid=os.getpid(), listen="127.0.0.1:9530", listening=True, updated=time.monotonic(),
                         sessions=4, streams=1, repointed=2,
                         target={"epoch": 7, "node": "S002", "ip": "127.0.0.22", "port": 9530})  # fmt: skip
    local.write_door(status)
    page = client_for(user).get(f"/sites/{KMSN}/").content.decode()
    assert 'id="door-h"' in page and '<p id="door-here" class="muted">' in page
    assert "leads stations to S002 (127.0.0.22:9530, epoch 7): 4 connections, 1 stream" in page
    local.write_door(dataclasses.replace(status, updated=time.monotonic() - 10))  # silent for 10 s
    page = client_for(user).get(f"/sites/{KMSN}/").content.decode()
    assert '<p id="door-here" class="banner warn">' in page and "has not reported for 3 s" in page
    local.write_door(dataclasses.replace(status, target=None))  # a leader it does not lead to
    page = client_for(user).get(f"/sites/{KMSN}/").content.decode()
    assert '<p id="door-here" class="banner warn">' in page and "refused at once" in page
    local.write_door(status)
    zh = client_for(user).get(f"/sites/{KMSN}/", HTTP_ACCEPT_LANGUAGE="zh-TW").content.decode()
    assert "工作站入口在 127.0.0.1:9530 上監聽，把工作站帶往 S002（127.0.0.22:9530，世代 7）" in zh


def test_a_station_arriving_while_the_leader_is_quiet_waits_and_is_led_to_the_next_leader(tmp_path: Path):
    """The leader's beacons went quiet (frozen or cut off: its kernel may still complete a
    handshake): a station's new connection is held, not dialled into it, through a moment with no
    lease read, and the re-point to the next leader leads it there; its first bytes reach the new
    relay only. A station of a PC whose view names no leader is still refused at once."""
    loopback = "127.0.0.73"
    port = free_pair(loopback, "127.0.0.74")

    async def main() -> None:
        local = LocalState(tmp_path)
        old, port_old = await relay(b"S002")
        new, port_new = await relay(b"S003")
        door = StationDoor(str(tmp_path), "S001", (loopback,), port, stale_after=5.0)
        task = asyncio.ensure_future(door.run())
        await until(lambda: door.proxy.listening)
        quiet = dataclasses.replace(view(7, "S002", port_old), beacons={"quiet": "S002", "interval": 0.2})
        local.write_pool(quiet)
        await until(lambda: door.gate.target is not None)
        reader, writer = await asyncio.open_connection(loopback, port)
        writer.write(b"ping")
        await until(lambda: door.proxy.snapshot()["waiting"] == 1)
        await asyncio.sleep(0.3)
        assert door.proxy.snapshot()["waiting"] == 1  # held: nothing dialled to the quiet leader
        # The takeover's moment with no lease read: a newcomer is refused at once, the held one waits.
        local.write_pool(PoolView(kmsn="k", node="S001", updated=time.monotonic(), lease_status="missing"))
        await until(lambda: door.gate.target is None)
        took = await asyncio.to_thread(refused_within, loopback, port)
        assert took < 0.05, f"{took * 1000:.1f} ms"
        assert door.proxy.snapshot()["waiting"] == 1
        local.write_pool(view(8, "S003", port_new))  # S003 took over
        assert await asyncio.wait_for(reader.readexactly(8), 5) == b"S003ping"
        writer.close()
        local.write_pool(view(8, "S003", port_new, released=True, ttl_s=0))
        await until(lambda: door.gate.target is None)
        took = await asyncio.to_thread(refused_within, loopback, port)
        assert took < 0.05, f"{took * 1000:.1f} ms"
        door._stop.set()
        assert await asyncio.wait_for(task, 5) == 0
        for server in (old, new):
            server.close()

    asyncio.run(main())
