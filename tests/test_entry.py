"""Entry members (issue 26 part 1, relay/server/entry.py): the keys, the pure target, and the entry's
proxy on real loopback sockets re-pointing as pool.json (written as the worker writes it) says."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path

import test_panel_support
from harness import free_pair
from test_proxy import closed, until

from elections.ports.local.localstate import LocalState
from elections.ports.local.pool_view import MemberView, PoolView, entry_of
from elections.ports.local.relay_files import EntryStatus
from relay.server.entry import EntryGate, EntryRunner, target_of
from stkrelay import config

dj = test_panel_support.dj
BASE = {
    "STK_KMSN": "k",
    "STK_STATION": "S001",
    "STK_RELAY_TOKEN": "entry-test-token-7f3a9c21d4e8b605",
    "STK_NODE_IP": "10.0.0.1",
}


def problems(**keys: str) -> list[str]:
    cfg = config.load(env={**BASE, **{f"STK_{k}": v for k, v in keys.items()}}, check_dirs=False)
    return [p.id for p in cfg.problems]


def test_entry_keys_are_checked():
    assert problems() == [] and problems(ENTRY="1", ENTRY_LISTEN="10.0.0.100:9540") == []
    assert problems(ENTRY="1") == ["stkrelay.E200"]
    assert problems(ENTRY="1", ENTRY_LISTEN="somewhere") == ["stkrelay.E201"]
    assert problems(ENTRY="1", ENTRY_LISTEN="10.0.0.1:99999") == ["stkrelay.E201"]
    assert problems(ENTRY="1", ENTRY_LISTEN="10.0.0.1:9529") == ["stkrelay.E202"]  # 9530 is the relay's
    assert problems(ENTRY="1", ENTRY_LISTEN="10.0.0.100:9530") == []  # a VIP of its own: no collision
    cfg = config.load(env={**BASE, "STK_ENTRY": "1", "STK_ENTRY_LISTEN": "[fd00::1]:9540"}, check_dirs=False)
    assert cfg.entry and cfg.entry_listen == ("fd00::1", 9540)


def view(
    epoch: int = 7, node: str = "S002", port: int = 9530, updated: float | None = None, **lease
) -> PoolView:
    doc = {"node": node, "epoch": epoch, "ip": "127.0.0.1", "port": port, "ttl_s": 3, "released": False}
    return PoolView(kmsn="k", node="S001", updated=time.monotonic() if updated is None else updated,
                    lease={**doc, **lease}, lease_status="valid")  # fmt: skip


def test_the_target_is_the_fresh_valid_unreleased_lease_and_nothing_else():
    now = time.monotonic()
    assert target_of(view(), now, 2.0) is not None
    assert target_of(view(updated=now - 5), now, 2.0) is None  # the worker stopped looking
    assert target_of(view(released=True, ttl_s=0), now, 2.0) is None
    assert target_of(PoolView(updated=now, lease=view().lease, lease_status="expired"), now, 2.0) is None
    assert target_of(view(port="9530"), now, 2.0) is None and target_of(view(epoch=None), now, 2.0) is None  # type: ignore[arg-type]
    assert target_of(PoolView(), now, 2.0) is None


def test_the_entry_never_goes_back_to_an_epoch_below_the_highest_it_forwarded_to():
    """Issue 40: a replayed old lease in the pool view (the worker publishes only what its memory
    took; this is the second wall) is no leader for the entry: no target, never the old relay."""
    now = time.monotonic()
    assert target_of(view(epoch=6), now, 2.0, floor=7) is None
    assert target_of(view(epoch=7), now, 2.0, floor=7) == target_of(view(epoch=7), now, 2.0)
    views = iter([view(epoch=7), view(epoch=6, node="S009", port=9531), view(epoch=8, node="S003")])
    gate = EntryGate(lambda: next(views), 2.0, cache_s=0.0)
    looks = [gate.look(), gate.look(), gate.look()]
    assert [t.epoch if t else None for t in looks] == [7, None, 8] and gate.floor == 8, looks


async def relay(name: bytes) -> tuple[asyncio.Server, int]:
    """A stand-in relay on loopback: it says its name, then echoes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(name)
        while data := await reader.read(1000):
            writer.write(data)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_the_entry_forwards_to_the_leader_read_re_points_on_a_new_epoch_and_refuses_without_one(
    tmp_path: Path,
):
    async def main() -> None:
        local = LocalState(tmp_path)
        a, port_a = await relay(b"S002")
        b, port_b = await relay(b"S003")
        listen = ("127.0.0.1", free_pair())
        local.write_pool(view(7, "S002", port_a))
        runner = EntryRunner(str(tmp_path), listen, stale_after=1.0)
        task = asyncio.ensure_future(runner.run())
        await until(lambda: runner.gate.target is not None)
        reader, writer = await asyncio.open_connection(*listen)
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"S002"
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        runner.write_status()
        assert local.entry().sessions == 1 and local.entry().target["node"] == "S002"  # type: ignore[index]

        local.write_pool(view(8, "S003", port_b))  # a new leader: the old session ends, the next goes there
        assert await closed(reader)
        reader, writer = await asyncio.open_connection(*listen)
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"S003"
        assert runner.repointed == 1 and runner.proxy.closes.get("repointed") == 1

        local.write_pool(view(8, "S003", port_b, released=True, ttl_s=0))  # no leader now
        assert await closed(reader)
        reader, writer = await asyncio.open_connection(*listen)
        assert await closed(reader)  # refused at once: nothing forwarded to anyone
        (tmp_path / "pool.json").write_text('{"lease": [1, 2], "updated": "soon"}')  # junk: still nobody
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_connection(*listen)
        assert await closed(reader)
        assert runner.proxy.refused.get("released", 0) >= 1 and runner.proxy.refused.get("no_view", 0) >= 1
        local.write_pool(view(9, "S002", port_a, updated=time.monotonic() - 10))  # a stale view: nobody
        await asyncio.sleep(0.1)
        assert runner.gate.target is None

        runner._stop.set()
        assert await asyncio.wait_for(task, 5) == 0
        status = local.entry()
        assert status.listen == f"127.0.0.1:{listen[1]}" and status.target is None and status.repointed == 1
        a.close()
        b.close()

    asyncio.run(main())


def test_an_entry_that_cannot_bind_says_why_in_entry_json(tmp_path: Path):
    async def main() -> None:
        taken, port = await relay(b"x")
        runner = EntryRunner(str(tmp_path), ("127.0.0.1", port), stale_after=1.0)
        assert await runner.run() == 1
        taken.close()

    asyncio.run(main())
    status = LocalState(tmp_path).entry()
    assert not status.listening and "cannot listen on 127.0.0.1:" in status.error


def test_hostile_entry_fields_are_no_entry():
    assert entry_of({"entry": "10.0.0.100:9540"}) == "10.0.0.100:9540"
    for bad in ("<script>:1", "x" * 100, 9540, ["10.0.0.1:1"], "10.0.0.1"):
        assert entry_of({"entry": bad}) is None
    m = MemberView.from_doc({"entry": "[fd00::1]:9540", "entry_sessions": True})
    assert m.entry == "[fd00::1]:9540" and m.entry_sessions is None
    assert EntryStatus.from_doc({"sessions": "many", "target": "S002", "listen": 5}) == EntryStatus()


def test_the_site_page_and_doctor_say_which_member_is_the_entry_where_and_its_sessions(dj, monkeypatch):
    from django.conf import settings
    from test_panel_support import KMSN, client_for, make_user, member, write_pool

    from elections.web.panel.entry_state import entry_checks

    members = {"S001": member(ip="127.0.0.21"), "S002": member(ip="127.0.0.22")}
    members["S001"].update(entry="203.0.113.5:9540", entry_sessions=3)
    doc = write_pool(dj["data_dir"], leader="S002", members=members)
    monkeypatch.setattr(settings, "STK", dataclasses.replace(settings.STK, entry=True))  # Config is frozen
    status = EntryStatus(pid=os.getpid(), listen="203.0.113.5:9540", listening=True,
                         updated=time.monotonic(), sessions=3, streams=1, repointed=2,
                         target={"epoch": 7, "node": "S002", "ip": "127.0.0.22", "port": 9530})  # fmt: skip
    LocalState(dj["data_dir"]).write_entry(status)
    page = client_for(make_user("vera")).get(f"/sites/{KMSN}/").content.decode()
    assert 'id="entry-members"' in page and "<code>203.0.113.5:9540</code>" in page
    assert "forwards to S002 (127.0.0.22:9530, epoch 7): 3 remote sessions, 1 stream" in page
    lines = entry_checks(PoolView.from_doc(json.loads(json.dumps(doc))), status, time.monotonic())
    assert lines[0] == ("entry member S001", True,
                        "public side 203.0.113.5:9540; remote sessions at its last heartbeat: 3")  # fmt: skip
    assert lines[1][1] and "forwarding to S002 (127.0.0.22:9530, epoch 7)" in lines[1][2]
    dead = EntryStatus(pid=status.pid, listen=status.listen, updated=time.monotonic() - 10)
    assert not entry_checks(PoolView.from_doc(doc), dead, time.monotonic())[1][1]


def test_the_gate_says_why_it_names_no_one():
    """The refusals' causes (`no_target_cause`, the door's `stkrelay_door_refused_total{reason}`)."""
    from relay.server.entry import no_target_cause

    now = time.monotonic()
    assert no_target_cause(view(), now, 2.0) is None
    assert no_target_cause(PoolView(), now, 2.0) == "no_view"
    assert no_target_cause(view(updated=now - 5), now, 2.0) == "stale_view"
    assert no_target_cause(view(updated=now + 5), now, 2.0) == "stale_view"  # another boot's view
    assert no_target_cause(view(released=True, ttl_s=0), now, 2.0) == "released"
    expired = PoolView(updated=now, lease=view().lease, lease_status="expired")
    assert no_target_cause(expired, now, 2.0) == "no_leader"
    assert no_target_cause(view(port="9530"), now, 2.0) == "no_leader"  # type: ignore[arg-type]
    assert no_target_cause(view(epoch=6), now, 2.0, floor=7) == "old_epoch"
    views = iter([view(epoch=7), view(epoch=8, node="S003"), view(epoch=8, node="S003")])
    gate = EntryGate(lambda: next(views), 2.0, cache_s=0.0)
    gate.target = gate.look()
    assert gate() is False and gate.shut_cause() == "leader_changing"  # until the runner re-points
