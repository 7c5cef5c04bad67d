"""The network-namespace site harness (tests/netns.py) works: three agents, each
in its own namespace with its own Redis, elect one leader whose relay the LAN
reaches; pulling the leader's cable (its share goes with it, as a LAN file
server's does) makes another agent take over after the TTL, and the old leader,
cut off, stops serving."""

import pytest
from harness import wait_until
from netns import RELAY_PORT, available

pytestmark = pytest.mark.agents


@pytest.mark.long
def test_agents_in_namespaces_elect_one_leader_and_a_cut_cable_moves_it(netns_site):
    site = netns_site(3, share="lan")
    site.start()
    lease = site.wait_settled(timeout=60)
    leader = site.by_name(lease.node)
    assert lease.ip == leader.ip and leader.ip.startswith("10.77.0.")
    wait_until(lambda: site.listening(leader, RELAY_PORT), 10, "the leader's relay, seen from the LAN")
    others = [a for a in site.agents if a is not leader]
    assert not any(site.listening(a, RELAY_PORT) for a in others)

    site.cut(leader)
    assert not site.listening(leader, RELAY_PORT)  # the cable really is out
    new = site.wait_leader(timeout=30, other_than=leader.name)
    assert new.epoch == lease.epoch + 1 and new.node in {a.name for a in others}
    wait_until(lambda: site.listening(site.by_name(new.node), RELAY_PORT), 10, "the new leader's relay")
    wait_until(lambda: leader.state().get("leader") is False, 15, "the cut-off leader to step down")

    site.mend(leader)
    wait_until(lambda: "follow" in leader.state().get("decision", ""), 30, "the mended agent to follow")
    assert site.lease().node == new.node


def test_the_lan_knobs_cut_delay_and_mend_a_hosts_link():
    why = available()
    if why:
        pytest.skip(why)
    import socket
    import threading
    import time

    from netns import Lan, ShapingUnavailable

    lan = Lan()
    try:
        a, b = lan.add("a", 1), lan.add("b", 2)
        server = b.call_in(lambda: socket.create_server((b.ip, 4000)))
        sink = b.call_in(lambda: socket.create_server((b.ip, 4001)))

        def connect_time() -> float:
            started = time.monotonic()
            with socket.create_connection((b.ip, 4000), timeout=1.5):
                return time.monotonic() - started

        assert a.call_in(connect_time) < 1.5  # it connects (the first SYN may wait for ARP)
        payload = b"x" * 24_000
        peer = []
        drain = threading.Thread(target=lambda: peer.append(_drain(sink, len(payload))), daemon=True)
        drain.start()
        lan.rate_limit("b", 100)  # 100 kbit/s: 24 kB take ~1.9 s instead of a millisecond

        def send_time() -> float:
            started = time.monotonic()
            with socket.create_connection((b.ip, 4001), timeout=10) as s:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                s.recv(1)
            return time.monotonic() - started

        assert a.call_in(send_time) >= 1.0
        drain.join(5)
        assert peer == [len(payload)]
        lan.rate_limit("b")
        try:
            lan.netem("b", delay_ms=150)
        except ShapingUnavailable:
            pass  # no sch_netem in this kernel: the knob says so instead of pretending
        else:
            assert a.call_in(connect_time) >= 0.3  # 150 ms each way on b's link
            lan.netem("b")
        lan.cut("b")
        with pytest.raises(OSError):
            a.call_in(connect_time)
        lan.mend("b")
        wait_until(lambda: _connects(a, b.ip), 10, "a connection once the cable is back")
        server.close()
        sink.close()
    finally:
        lan.close()
    assert not any(h.name in lan.hub.run("ip", "netns", "list", check=False).stdout for h in (a, b))


def _connects(host, ip: str) -> bool:
    import socket

    def attempt() -> bool:
        try:
            socket.create_connection((ip, 4000), timeout=1).close()
            return True
        except OSError:
            return False

    return host.call_in(attempt)


def _drain(server, expect: int) -> int:
    conn, _ = server.accept()
    with conn:
        got = 0
        while got < expect:
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += len(chunk)
        conn.sendall(b"k")
        return got
