"""The on-prem VIP executor on a real (namespaced) LAN.

Each test builds its own LAN out of network namespaces: a hub namespace with a
bridge, and nodes A, B and a peer, each with one veth port `eth0` on it, using
TEST-NET-1 (192.0.2.0/24) only inside those namespaces. The host's interfaces
are never touched; every namespace is deleted in a finalizer.
"""

import json
import secrets
import shutil
import subprocess
import sys
import time

import pytest

from elections.core.actions import ActionPlan, action_config, demotion_plan, plan_for
from elections.executors import APPLIED, FAILED, FENCED, ActionFence, RelayExecutor, VipExecutor, run_plan

VIP = "192.0.2.100"
NODES = {"a": "192.0.2.1", "b": "192.0.2.2", "peer": "192.0.2.3"}


def sh(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=check)


def wait_for(what, probe, within=5.0, every=0.05):
    """Poll `probe` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {within:g} s waiting for {what}")
        time.sleep(every)


class Lan:
    def __init__(self):
        tag = secrets.token_hex(3)
        self.hub = f"stkhub-{tag}"
        self.ns = {name: f"stk{name}-{tag}" for name in NODES}
        self.made = []

    def build(self):
        sh("ip", "netns", "add", self.hub)
        self.made.append(self.hub)
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        for name, addr in NODES.items():
            ns = self.ns[name]
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            port = f"p-{name}"
            # Created inside the hub, its peer end moved straight into the node: never on the host.
            sh("ip", "-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", self.hub, "link", "set", port, "master", "br0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        return self

    def destroy(self):
        for ns in reversed(self.made):
            sh("ip", "netns", "del", ns, check=False)

    def mac(self, name):
        [link] = json.loads(sh("ip", "-n", self.ns[name], "-j", "link", "show", "eth0").stdout)
        return link["address"]

    def addresses(self, name):
        [link] = json.loads(sh("ip", "-n", self.ns[name], "-j", "addr", "show", "eth0").stdout)
        return {i["local"] for i in link.get("addr_info", []) if i.get("family") == "inet"}

    def peer_sees(self):
        """The peer's neighbour entry for the VIP: (MAC, state) or None."""
        out = json.loads(sh("ip", "-n", self.ns["peer"], "-j", "neigh", "show", VIP).stdout or "[]")
        for entry in out:
            if entry.get("lladdr"):
                return entry["lladdr"], entry.get("state")
        return None

    def poke_vip_from_peer(self):
        """One UDP datagram from the peer to the VIP: the peer's kernel ARPs for it."""
        code = f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ({VIP!r}, 9))"
        sh("ip", "netns", "exec", self.ns["peer"], sys.executable, "-c", code)


@pytest.fixture
def lan(request):
    probe = f"stkprobe-{secrets.token_hex(3)}"
    try:
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        pytest.skip("iproute2's `ip` is not installed")
    if made.returncode != 0:
        pytest.skip(
            f"cannot create network namespaces (needs root / CAP_SYS_ADMIN+NET_ADMIN): {made.stderr.strip()}"
        )
    sh("ip", "netns", "del", probe, check=False)
    net = Lan()
    request.addfinalizer(net.destroy)
    return net.build()


def node(lan, name, mode, tmp_path):
    cfg, problems = action_config(
        {"VIP_ADDRESS": f"{VIP}/24", "VIP_INTERFACE": "eth0", "VIP_NETNS": lan.ns[name], "VIP_GARP": mode}
    )
    assert problems == []
    data = tmp_path / name
    data.mkdir(exist_ok=True)
    return cfg, [RelayExecutor(data), VipExecutor()]


@pytest.mark.parametrize("mode", ["builtin", "arping"])
def test_it_moves_the_vip_from_a_to_b_and_the_peer_follows_the_gratuitous_arp(lan, mode, tmp_path):
    if mode == "arping" and shutil.which("arping") is None:
        pytest.skip("arping (Debian iputils-arping) is not installed; the built-in sender is tested instead")
    held = {"a": 7, "b": None}
    cfg_a, ex_a = node(lan, "a", mode, tmp_path)
    cfg_b, ex_b = node(lan, "b", mode, tmp_path)
    gate_a, gate_b = ActionFence(lambda: held["a"]), ActionFence(lambda: held["b"])

    # Epoch 7: A wins and takes the VIP; the peer talks to it and learns A's MAC.
    out = run_plan(plan_for(7, "a", cfg_a), ex_a, gate_a, None)
    assert [o.status for o in out] == [APPLIED, APPLIED], [o.line() for o in out]
    assert VIP in lan.addresses("a")

    def peer_maps_vip_to(mac):
        lan.poke_vip_from_peer()
        seen = lan.peer_sees()
        return seen if seen and seen[0] == mac else None

    mac_a, mac_b = lan.mac("a"), lan.mac("b")
    wait_for(f"the peer to learn {VIP} at A's MAC {mac_a}", lambda: peer_maps_vip_to(mac_a))

    # Epoch 8: A loses (and releases), B wins and announces the VIP.
    held["a"], held["b"] = None, 8
    out = run_plan(demotion_plan(7, "a", cfg_a), ex_a, gate_a, None)
    assert [o.status for o in out] == [APPLIED, APPLIED], [o.line() for o in out]
    out = run_plan(plan_for(8, "b", cfg_b), ex_b, gate_b, None)
    assert [o.status for o in out] == [APPLIED, APPLIED], [o.line() for o in out]
    assert "gratuitous ARP(s) sent" in out[1].message
    assert VIP not in lan.addresses("a") and VIP in lan.addresses("b")

    # Without any traffic from the peer, its neighbour table now says B.
    seen = wait_for(
        f"the peer to map {VIP} to B's MAC {mac_b}", lambda: (s := lan.peer_sees()) and s[0] == mac_b and s
    )
    assert seen[0] == mac_b != mac_a


def test_it_fences_a_stale_assign_and_leaves_the_namespace_alone(lan, tmp_path):
    cfg_a, ex_a = node(lan, "a", "builtin", tmp_path)
    vip_action = plan_for(7, "a", cfg_a).actions[1]
    for held in (None, 8):  # lost the lease; or already re-elected at a newer epoch
        [out] = run_plan(ActionPlan(7, "a", (vip_action,)), ex_a, ActionFence(lambda h=held: h), None)
        assert out.status == FENCED
        assert VIP not in lan.addresses("a")


def test_it_treats_adding_a_present_and_removing_an_absent_vip_as_done(lan, tmp_path):
    cfg_a, ex_a = node(lan, "a", "off", tmp_path)
    gate = ActionFence(lambda: 3)
    assign = ActionPlan(3, "a", (plan_for(3, "a", cfg_a).actions[1],))
    release = ActionPlan(3, "a", (demotion_plan(3, "a", cfg_a).actions[1],))
    first, again = run_plan(assign, ex_a, gate, None) + run_plan(assign, ex_a, gate, None)
    assert (first.status, again.status) == (APPLIED, APPLIED)
    assert "added to eth0" in first.message and "already on eth0" in again.message
    assert "gratuitous ARP off" in first.message
    gone, gone_again = run_plan(release, ex_a, gate, None) + run_plan(release, ex_a, gate, None)
    assert "removed from eth0" in gone.message and "was not on eth0" in gone_again.message
    assert VIP not in lan.addresses("a")


def test_it_reports_a_missing_interface_as_a_readable_failure(lan, tmp_path):
    cfg, _ = action_config({"VIP_ADDRESS": VIP, "VIP_INTERFACE": "eth9", "VIP_NETNS": lan.ns["a"]})
    [out] = run_plan(
        ActionPlan(3, "a", (plan_for(3, "a", cfg).actions[1],)), [VipExecutor()], ActionFence(lambda: 3), None
    )
    assert out.status == FAILED
    assert out.message.startswith(f"ip addr add (netns {lan.ns['a']}) exited ")
    assert 'Cannot find device "eth9"' in out.message
