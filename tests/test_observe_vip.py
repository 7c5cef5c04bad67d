# ruff: noqa: F811 (`lan` is the fixture of test_executor_vip, imported)
"""The VIP executor's `observe()` on a real (namespaced) LAN: the interface's own
addresses, and an ARP probe that finds every host answering for the VIP — a
member moved to by hand, two at once, a host that is no member — read-only."""

from test_executor_vip import NODES, VIP, lan, sh  # noqa: F401

from elections.core.actions import action_config
from elections.core.ownership import CONFLICT, DRIFT, OK, ORPHAN, ownership_map
from elections.executors import VipExecutor


def vip_args(lan, name):
    cfg, problems = action_config(
        {"VIP_ADDRESS": f"{VIP}/24", "VIP_INTERFACE": "eth0", "VIP_NETNS": lan.ns[name]}
    )
    assert problems == []
    from dataclasses import asdict

    return asdict(cfg.vip)


def put(lan, name, on=True):
    sh("ip", "-n", lan.ns[name], "addr", "add" if on else "del", f"{VIP}/24", "dev", "eth0")


def look(lan, name):
    return VipExecutor().observe(vip_args(lan, name))


def test_it_sees_the_vip_on_its_own_interface_and_nowhere_else(lan):
    put(lan, "a")
    s = look(lan, "a")
    assert (s.held, s.nic, s.holders, s.complete, s.error) == (True, lan.mac("a"), (lan.mac("a"),), True, "")
    before = lan.addresses("a")
    assert look(lan, "b").held is False and lan.addresses("a") == before  # read-only


def test_the_arp_probe_finds_the_member_it_was_moved_to_by_hand(lan):
    put(lan, "b")
    s = look(lan, "a")
    assert s.held is False and s.holders == (lan.mac("b"),) and s.complete
    reports = {"b": [look(lan, "b").report()]}
    from elections.core.ownership import reports_of

    [entry] = ownership_map("a", "a", 4, [s], {n: reports_of(n, {"holds": r}) for n, r in reports.items()})
    assert entry.verdict == DRIFT and entry.holders == ("b",)
    assert VIP not in lan.addresses("a") and VIP in lan.addresses("b")


def test_two_hosts_holding_the_vip_are_a_conflict_and_a_stranger_an_orphan(lan):
    from elections.core.ownership import reports_of

    put(lan, "a")
    put(lan, "b")
    a, b = look(lan, "a"), look(lan, "b")
    assert set(a.holders) == {lan.mac("a"), lan.mac("b")}
    reports = {"b": reports_of("b", {"holds": [b.report()]})}
    [entry] = ownership_map("a", "a", 4, [a], reports)
    assert entry.verdict == CONFLICT and entry.holders == ("a", "b")

    put(lan, "b", on=False)
    put(lan, "a", on=False)
    put(lan, "peer")  # a host on the LAN that is no member
    [entry] = ownership_map(
        "a", "a", 4, [look(lan, "a")], {"b": reports_of("b", {"holds": [look(lan, "b").report()]})}
    )
    assert entry.verdict == ORPHAN and entry.foreign == (lan.mac("peer"),)
    put(lan, "peer", on=False)
    put(lan, "a")
    [entry] = ownership_map("a", "a", 4, [look(lan, "a")], {})
    assert entry.verdict == OK


def test_a_missing_interface_is_an_observation_that_failed_not_a_verdict(lan):
    args = {**vip_args(lan, "a"), "interface": "eth9"}
    s = VipExecutor().observe(args)
    assert (
        s.held is None and not s.complete and s.error.startswith(f"ip -j addr (netns {lan.ns['a']}) exited 1")
    )
    assert '"eth9" does not exist' in s.error
    assert list(NODES) == ["a", "b", "peer"]


def test_a_probe_that_cannot_open_its_socket_still_reports_what_the_interface_holds(lan):
    put(lan, "a")
    s = VipExecutor(python="/nonexistent/python3").observe(vip_args(lan, "a"))
    assert s.held is True and not s.complete and s.error.startswith("arp probe:")
    assert s.holders == (lan.mac("a"),)


FLOOD = r"""
import os, socket, struct, sys, time
vip, until = socket.inet_aton(sys.argv[1]), time.monotonic() + float(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
s.bind(("eth0", 0x0806))
n = 0
while time.monotonic() < until:
    fake = bytes([2]) + os.urandom(5)  # a locally administered MAC, a new one each time
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + fake + vip + b"\xff" * 6 + b"\0" * 4
    s.send(b"\xff" * 6 + fake + b"\x08\x06" + arp + b"\0" * 18)
    s.send(b"\xff" * 6 + fake + b"\x08\x06" + b"junk")  # and a truncated one
    n += 1
    time.sleep(0.002)
print(n)
"""


def test_a_flood_of_forged_arp_replies_is_bounded_shown_and_never_the_members(lan):
    import subprocess
    import sys

    from elections.core.ownership import MAX_HOLDERS

    put(lan, "a")
    flood = subprocess.Popen(["ip", "netns", "exec", lan.ns["peer"], sys.executable, "-c", FLOOD, VIP, "3"],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        s = look(lan, "a")
    finally:
        sent = int(flood.communicate(timeout=10)[0])
    assert sent > MAX_HOLDERS
    assert s.held is True and s.complete and len(s.holders) <= MAX_HOLDERS + 1 and lan.mac("a") in s.holders
    [entry] = ownership_map("a", "a", 4, [s], {})
    assert entry.verdict == CONFLICT and entry.holders == ("a",) and 1 <= len(entry.foreign) <= MAX_HOLDERS


def test_without_vip_netns_the_probe_runs_in_the_agents_own_process(lan):
    """An agent inside the namespace (as on a host): no `python -c`, the same answer."""
    import threading

    from netns import Netns

    put(lan, "b")
    args = {**vip_args(lan, "a"), "netns": ""}
    box = {}

    def inside():
        Netns.enter(type("Ns", (), {"name": lan.ns["a"]})())  # this thread only
        calls = []
        ex = VipExecutor(runner=lambda argv, timeout: calls.append(argv) or _ip(argv))
        box["s"], box["calls"] = ex.observe(args), calls

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join(30)
    s, calls = box["s"], box["calls"]
    assert (s.held, s.holders, s.complete) == (False, (lan.mac("b"),), True)
    assert [c[:2] for c in calls] == [["ip", "-j"]]  # the interface read; the probe made no process


def _ip(argv):
    from elections.executors import run_command

    return run_command(argv, 10)
