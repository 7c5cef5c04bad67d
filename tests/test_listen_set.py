"""The relay's listen set (relay.server.listen_set), the held addresses it reads
(addresses.json, elections.executors.held), and RELAY_LOOPBACK.

The pure parts are tested directly; binding is tested with a real
`relay.server.relay_server.RelayServer` inside a network namespace of this test's own
(tests/netns.py), where an address can be absent, then arrive, as a VIP does:
without IP_FREEBIND the bind waits for it, with it the listener is up first.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess

import pytest
from harness import write_lease  # noqa: F401 (the harness is importable: conftest's path)

from elections.core.actions import ASSIGN_IP, ASSIGN_VIP, RELEASE_VIP, ActionPlan, action_config, plan_for
from elections.executors import (
    APPLIED,
    FAILED,
    FENCED,
    ActionFence,
    AddressBook,
    Outcome,
    RelayExecutor,
    run_plan,
)
from elections.executors.held import updated
from elections.ports.local.localstate import LocalState
from elections.ports.local.relay_files import MAX_HELD_ADDRESSES, HeldAddress
from relay.server.listen_set import FAILED as BIND_FAILED
from relay.server.listen_set import LISTENING, WAITING, ListenAddress, ListenSet, wanted
from stkrelay.config import load

VIP_CFG = {"VIP_ADDRESS": "10.0.0.100/24", "VIP_INTERFACE": "eth0"}


# -- wanted(): which addresses ------------------------------------------------------------
def held(address: str, epoch: int, kind: str = "vip") -> HeldAddress:
    return HeldAddress(address, epoch, kind, "vip", address)


def hosts(addresses: tuple[ListenAddress, ...]) -> list[tuple[str, str]]:
    return [(a.host, a.why) for a in addresses]


def test_it_wants_node_ip_loopback_and_the_addresses_held_for_its_own_epoch_only():
    got = wanted("192.168.1.10", "auto", [held("192.168.1.100", 7), held("192.168.1.101", 6)], 7)
    assert hosts(got) == [("192.168.1.10", "node"), ("127.0.0.1", "loopback"), ("192.168.1.100", "vip")]
    assert [a.required for a in got] == [True, False, False]
    assert [a.freebind for a in got] == [False, False, True]  # only a held address may not be here yet
    assert hosts(wanted("192.168.1.10", "auto", [held("10.1.1.1", 7, "secondary_ip")], None))[2:] == []


@pytest.mark.parametrize(
    ("node_ip", "mode", "loopback"),
    [
        ("192.168.1.10", "auto", True),
        ("127.0.0.21", "auto", False),  # a test machine: agents share loopback, each on its 127.0.0.x
        ("127.0.0.21", "on", True),
        ("192.168.1.10", "off", False),
        ("127.0.0.1", "on", False),  # NODE_IP is 127.0.0.1 itself: once
        ("fd00::10", "auto", True),
    ],
)
def test_relay_loopback_decides_the_loopback_listener(node_ip, mode, loopback):
    got = hosts(wanted(node_ip, mode, [], 1))
    assert (("127.0.0.1", "loopback") in got) is loopback
    assert got[0] == (node_ip, "node") and len(got) == len({h for h, _ in got})


def test_a_wildcard_node_ip_covers_every_address_alone():
    assert hosts(wanted("0.0.0.0", "on", [held("192.168.1.100", 3)], 3)) == [("0.0.0.0", "node")]


def test_an_address_held_twice_or_equal_to_node_ip_is_listened_on_once():
    twice = [held("192.168.1.10", 2), held("10.0.0.5", 2), held("10.0.0.5", 2)]
    got = wanted("192.168.1.10", "off", twice, 2)
    assert hosts(got) == [("192.168.1.10", "node"), ("10.0.0.5", "vip")]


# -- addresses.json: hostile or damaged content is no address ------------------------------
@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"[" * 200_000,  # RecursionError in json
        b'{"addresses": "10.0.0.1"}',
        b'{"addresses": [{"address": "10.0.0.1"}]}',  # no epoch
        b'{"addresses": [{"address": "10.0.0.1", "epoch": true}]}',
        b'{"addresses": [{"address": "999.0.0.1", "epoch": 1}]}',
        b'{"addresses": [{"address": "0.0.0.0", "epoch": 1}]}',  # a wildcard would listen everywhere
        b'{"addresses": [{"address": "224.0.0.1", "epoch": 1}]}',
        b'{"addresses": [{"address": "' + b"1" * 5000 + b'", "epoch": 1}]}',
        b'{"addresses": [{"address": ["10.0.0.1"], "epoch": 1}]}',
        b"x" * (5 << 20),  # over the size bound: not read at all
    ],
)
def test_a_damaged_or_hostile_addresses_file_holds_nothing(tmp_path, content):
    (tmp_path / "addresses.json").write_bytes(content)
    assert LocalState(tmp_path).held_addresses() == ()


def test_the_addresses_file_is_bounded_canonical_and_keeps_what_is_well_formed(tmp_path):
    entries = [{"address": f"10.0.{i // 250}.{i % 250 + 1}", "epoch": 4} for i in range(500)]
    entries.insert(0, {"address": "FD00:0::1", "epoch": 4, "kind": "evil", "target": "t" * 999})
    (tmp_path / "addresses.json").write_text(json.dumps({"addresses": entries}))
    got = LocalState(tmp_path).held_addresses()
    assert len(got) == MAX_HELD_ADDRESSES
    (tmp_path / "addresses.json").write_text(json.dumps({"addresses": entries[:1]}))
    [one] = LocalState(tmp_path).held_addresses()
    assert (one.address, one.kind, len(one.target)) == ("fd00::1", "vip", 200)


# -- the address book: what the executors' outcomes say is held ----------------------------
def plans(epoch: int) -> tuple[ActionPlan, list]:
    aws = {"AWS_ENI_ID": "eni-0123456789abcdef0", "AWS_PRIVATE_IP": "10.0.0.7", "AWS_REGION": "eu-west-1"}
    config, problems = action_config({**VIP_CFG, **aws})
    assert not problems
    plan = plan_for(epoch, "S001", config)
    return plan, [a for a in plan.actions if a.verb in (ASSIGN_VIP, ASSIGN_IP)]


def test_an_applied_assignment_is_held_for_its_epoch_and_a_failed_or_fenced_one_is_not():
    _, (vip, ip) = plans(5)
    after = updated((), Outcome(vip, APPLIED, "ok"))
    assert after == (HeldAddress("10.0.0.100", 5, "vip", "vip", vip.target),)
    after = updated(after, Outcome(ip, APPLIED, "ok"))
    got = [(h.address, h.kind, h.executor) for h in after]
    assert got == [("10.0.0.100", "vip", "vip"), ("10.0.0.7", "secondary_ip", "aws")]
    assert updated((), Outcome(vip, FAILED, "ip exited 2")) is None
    assert updated((), Outcome(vip, FENCED, "stale")) is None


def test_a_release_drops_its_epochs_entry_but_never_a_newer_epochs():
    config, _ = action_config(VIP_CFG)
    from elections.core.actions import demotion_plan

    [release] = [a for a in demotion_plan(5, "S001", config).actions if a.verb == RELEASE_VIP]
    mine = (HeldAddress("10.0.0.100", 5),)
    assert updated(mine, Outcome(release, APPLIED, "removed")) == ()
    assert updated(mine, Outcome(release, FAILED, "ip exited 2")) == ()  # letting go either way
    assert updated(mine, Outcome(release, FENCED, "holds 7")) is None
    assert updated((HeldAddress("10.0.0.100", 7),), Outcome(release, APPLIED, "removed")) is None


def test_run_plan_notifies_each_outcome_and_the_address_book_writes_what_the_relay_reads(tmp_path):
    plan, _ = plans(3)
    relay_only = ActionPlan(3, "S001", plan.actions[:1])  # start_relay, by the real relay executor
    seen: list[Outcome] = []
    outcomes = run_plan(
        relay_only, [RelayExecutor(tmp_path)], ActionFence(lambda: 3), None, notify=seen.append
    )
    assert seen == outcomes and outcomes[0].ok

    def broken(outcome: Outcome) -> None:
        raise RuntimeError("a notify that fails")

    assert run_plan(relay_only, [RelayExecutor(tmp_path)], ActionFence(lambda: 3), None, notify=broken)[0].ok
    book = AddressBook(tmp_path)
    _, (vip, _ip) = plans(3)
    book(Outcome(vip, APPLIED, "ok"))
    assert LocalState(tmp_path).held_addresses() == (HeldAddress("10.0.0.100", 3, "vip", "vip", vip.target),)
    book(Outcome(relay_only.actions[0], APPLIED, "ok"))  # not an address: nothing changes
    assert len(LocalState(tmp_path).held_addresses()) == 1


# -- RELAY_LOOPBACK ------------------------------------------------------------------------
def test_relay_loopback_takes_auto_on_off_and_refuses_anything_else_with_e090(tmp_path):
    base = {"STK_KMSN": "k", "STK_STATION": "S001", "STK_RELAY_TOKEN": "t" * 32,
            "STK_DATA_DIR": str(tmp_path), "STK_LEASE_DIR": str(tmp_path)}  # fmt: skip
    assert load(env=base, check_dirs=False).relay_loopback == "auto"
    assert load(env={**base, "STK_RELAY_LOOPBACK": "OFF"}, check_dirs=False).relay_loopback == "off"
    assert load(env={**base, "STK_RELAY_LOOPBACK": "1"}, check_dirs=False).relay_loopback == "on"
    cfg = load(env={**base, "STK_RELAY_LOOPBACK": "sometimes"}, check_dirs=False)
    ids = [(p.id, p.key) for p in cfg.problems if p.key == "RELAY_LOOPBACK"]
    assert ids == [("stkrelay.E090", "RELAY_LOOPBACK")]


# -- binding, in a namespace of our own ----------------------------------------------------
_ns = itertools.count(1)


@pytest.fixture
def netns():
    from netns import PREFIX, Netns, available

    why = available()
    if why:
        pytest.skip(why)
    ns = Netns(f"{PREFIX}-{os.getpid()}-{next(_ns)}-listen")
    yield ns
    ns.delete()


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def test_a_held_address_is_bound_once_it_arrives_or_at_once_with_freebind(netns):
    from relay.server.relay_server import RelayServer

    def add(address: str) -> None:
        subprocess.run(["ip", "-n", netns.name, "addr", "add", f"{address}/32", "dev", "lo"], check=True,
                       capture_output=True, timeout=10)  # fmt: skip

    async def scenario() -> dict:
        server = RelayServer(node="S001", kmsn="k", token="t", gate=lambda: True, epoch=1)
        await server.start("127.0.0.1", 0, 0)
        port = server.addresses["json"][1]
        listen = ListenSet.of(server)
        late = ListenAddress("10.99.0.5", "vip", freebind=False)  # a platform without IP_FREEBIND
        free = ListenAddress("10.99.0.6", "vip", freebind=True)
        base = ListenAddress("127.0.0.1", "node", required=True)
        out: dict = {}
        assert await listen.reconcile([base, late, free]) is True
        out["before"] = {e["address"]: e["state"] for e in listen.snapshot()}
        out["free_bound_before"] = "10.99.0.6" in server.listening_on
        add("10.99.0.5")
        add("10.99.0.6")
        await listen.reconcile([base, late, free])
        out["after"] = {e["address"]: e["state"] for e in listen.snapshot()}
        out["connects"] = [await asyncio.to_thread(_connects, h, port) for h in ("10.99.0.5", "10.99.0.6")]
        await listen.reconcile([base])
        out["gone"] = [await asyncio.to_thread(_connects, h, port) for h in ("10.99.0.5", "10.99.0.6")]
        out["left"] = server.listening_on
        server.lose_leadership()
        listen.forget()
        await server.wait_closed(0.5)
        out["lost"] = await asyncio.to_thread(_connects, "127.0.0.1", port)
        return out

    got = netns.call_in(lambda: asyncio.run(scenario()))
    assert got["before"] == {"127.0.0.1": LISTENING, "10.99.0.5": WAITING, "10.99.0.6": LISTENING}
    assert got["free_bound_before"]
    assert got["after"] == {"127.0.0.1": LISTENING, "10.99.0.5": LISTENING, "10.99.0.6": LISTENING}
    assert got["connects"] == [True, True]
    assert got["gone"] == [False, False] and got["left"] == ["127.0.0.1"]
    assert got["lost"] is False


def test_a_bind_that_fails_for_another_reason_is_failed_not_waiting_and_logged_once(netns, caplog):
    from relay.server.relay_server import RelayServer

    async def scenario() -> list:
        squatter = socket.create_server(("127.0.0.2", 0))
        port = squatter.getsockname()[1]
        server = RelayServer(node="S001", kmsn="k", token="t", gate=lambda: True, epoch=1)
        await server.start("127.0.0.1", port, port + 1)
        listen = ListenSet.of(server)
        wanted_now = [ListenAddress("127.0.0.1", "node", required=True),
                      ListenAddress("127.0.0.2", "loopback")]  # fmt: skip
        for _ in range(3):
            await listen.reconcile(wanted_now)
        states = [(e["address"], e["state"]) for e in listen.snapshot()]
        required = [s.address.host for s in listen.failed_required()]
        squatter.close()
        server.lose_leadership()
        await server.wait_closed(0.5)
        return [states, required]

    states, required = netns.call_in(lambda: asyncio.run(scenario()))
    assert states == [("127.0.0.1", LISTENING), ("127.0.0.2", BIND_FAILED)] and required == []
    assert sum("cannot listen on 127.0.0.2" in r.getMessage() for r in caplog.records) == 1
