"""RELAY_KIND = exec on real agents: the site's own relay behind the fencing proxy (docs/design.md §16).

The external relay is tests/standin_relay.py (not stkrelay's relay code): it echoes
length-prefixed frames and counts every byte it receives into a stats file in the
agent's DATA_DIR, so a test can say exactly what reached it and when.
"""

import contextlib
import itertools
import json
import os
import shlex
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest
from harness import FAST, KMSN, PY, ROOT, free_port, listening, wait_until
from test_agents_steering import relayctl, wait_pool_view

pytestmark = pytest.mark.agents

TTL = float(FAST["LEASE_TTL"])
STANDIN = ROOT / "tests" / "standin_relay.py"


def standin_command(*extra: str) -> str:
    words = [PY, str(STANDIN), "--host", "{host}", "--port", "{port}",
             "--passthrough-port", "{passthrough_port}", "--stats", "standin-{epoch}.json",
             "--epoch", "{epoch}", "--kmsn", "{kmsn}", *extra]  # fmt: skip
    return shlex.join(words)


def exec_site(site_factory, n=3, extra=(), **settings):
    """A site whose members run the stand-in behind their proxies, each on its own loopback address."""
    site = site_factory(n, extra={"RELAY_KIND": "exec", "RELAY_EXEC": standin_command(*extra), **settings})
    port = free_port()
    for agent in site.agents:  # the stand-in listens on the agent's own 127.0.0.x (loopback)
        with open(agent.ini, "a") as f:
            f.write(f"RELAY_EXEC_LISTEN = {agent.ip}:{port}\n")
    return site


def doctor_checks(agent) -> list:
    """`relayctl doctor --json` of `agent` (exit 1 when any check fails: some may, on a busy machine)."""
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([PY, str(ROOT / "manage.py"), "relayctl", "doctor", "--json"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    assert out.returncode in (0, 1), out.stdout + out.stderr
    return json.loads(out.stdout)


def relay_port(site) -> int:
    return int(site.agents[0].setting("RELAY_PORT"))


def relay_doc(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "relay.json").read_text())
    except (OSError, ValueError):
        return {}


def serves(agent, epoch) -> bool:
    doc = relay_doc(agent)
    return doc.get("epoch") == epoch and doc.get("listening") is True


def stats(agent, epoch) -> dict:
    try:
        return json.loads((agent.data_dir / f"standin-{epoch}.json").read_text())
    except (OSError, ValueError):
        return {}


def alive(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def echo_once(ip: str, port: int, body: bytes = b'{"n": 1}', timeout: float = 1.0) -> bool:
    """One frame through the proxy and its echo back; False if the proxy closed or refused."""
    try:
        with socket.create_connection((ip, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(frame(body))
            want, got = len(body) + 4, b""
            while len(got) < want:
                data = s.recv(want - len(got))
                if not data:
                    return False
                got += data
            return got == frame(body)
    except OSError:
        return False


def passes_raw(agent, epoch, port: int) -> bool:
    """Raw bytes from one passthrough connection through the proxy reach another one."""
    before = stats(agent, epoch).get("accepted", 0)
    with socket.create_connection((agent.ip, port), timeout=2) as viewer, \
            socket.create_connection((agent.ip, port), timeout=2) as publisher:  # fmt: skip
        wait_until(lambda: stats(agent, epoch).get("accepted", 0) >= before + 2, 5, "both at the stand-in")
        publisher.sendall(b"raw bytes")
        viewer.settimeout(2)
        got = b""
        while len(got) < 9:
            data = viewer.recv(64)
            if not data:
                break
            got += data
        return got == b"raw bytes"


def test_a_kill_9_of_the_leader_and_the_new_leaders_proxy_forwards_within_1s_of_serving(site_factory):
    site = exec_site(site_factory)
    site.start()
    first = site.wait_leader(timeout=40)
    port = relay_port(site)
    old = site.by_name(first.node)
    wait_until(lambda: serves(old, first.epoch), 15, "the leader's external relay to serve")
    assert echo_once(old.ip, port), "nothing through the leader's proxy"
    assert passes_raw(old, first.epoch, port + 1), "no raw bytes through the leader's passthrough proxy"
    doc = relay_doc(old)
    assert doc["snapshot"]["kind"] == "exec" and doc["snapshot"]["external"]["accepting"] is True
    standin = stats(old, first.epoch)
    assert (standin["epoch"], standin["kmsn"]) == (str(first.epoch), KMSN), "placeholders not filled in"
    assert not any(listening(a.ip, port) for a in site.agents if a is not old), "a follower's proxy listens"
    assert not any(stats(a, first.epoch) for a in site.agents if a is not old), "a follower runs the relay"
    old_pid = standin["pid"]
    # What runs, in the doctor and the metrics.
    doctor = {c["check"]: c for c in doctor_checks(old)}
    kind = doctor["relay kind"]
    assert kind["ok"] and kind["detail"].startswith("exec: ") and "accepting" in kind["detail"], kind
    with old.urlopen("/metrics") as r:
        metrics = r.read().decode()
    assert f'stkrelay_proxy_upstream_up{{kmsn="{KMSN}"}} 1.0' in metrics
    assert f'stkrelay_proxy_accepted_total{{kmsn="{KMSN}"}}' in metrics
    assert f'stkrelay_proxy_bytes_total{{direction="up",kmsn="{KMSN}"}}' in metrics

    old.kill9()
    killed = time.monotonic()
    new = site.wait_leader(timeout=15, other_than=first.node)
    target = site.by_name(new.node)
    wait_until(lambda: serves(target, new.epoch), 10, "the new leader's external relay to serve")
    served = time.monotonic()
    wait_until(lambda: echo_once(target.ip, port, timeout=0.5), 5, "a frame through the new leader's proxy")
    forwarded = time.monotonic()
    assert forwarded - served < 1.0, f"the new proxy forwarded {forwarded - served:.2f} s after serving"
    assert forwarded - killed < TTL + 3, f"takeover took {forwarded - killed:.2f} s"
    # The old leader's external relay died with its agent (PR_SET_PDEATHSIG), in a session of its own.
    wait_until(lambda: not alive(old_pid), 5, "the old leader's external relay to die with its agent")
    print(
        f"kill -9 -> forwarding {forwarded - killed:.2f} s; serving -> forwarding {forwarded - served:.3f} s"
    )


@pytest.mark.long
def test_a_sigstopped_leader_woken_after_2_ttl_forwards_not_one_byte(site_factory):
    site = exec_site(site_factory)
    site.start()
    first = site.wait_leader(timeout=40)
    port = relay_port(site)
    old = site.by_name(first.node)
    wait_until(lambda: serves(old, first.epoch), 15, "the leader's external relay to serve")
    client = socket.create_connection((old.ip, port), timeout=2)
    client.settimeout(2)
    client.sendall(frame(b"hello"))
    assert client.recv(64) == frame(b"hello")
    client.setblocking(False)
    sent, ended = [0], threading.Event()

    def keep_sending() -> None:  # through the old leader's proxy, while it is frozen and after it wakes
        while not ended.is_set():
            try:
                sent[0] += client.send(frame(b"x" * 100))
                with contextlib.suppress(BlockingIOError):
                    if client.recv(65536) == b"":
                        break
            except BlockingIOError:
                pass
            except OSError:
                break
            time.sleep(0.01)
        ended.set()

    sender = threading.Thread(target=keep_sending, daemon=True)
    sender.start()
    wait_until(lambda: stats(old, first.epoch).get("received", 0) > 500, 5, "bytes through the old proxy")
    old.signal_group(signal.SIGSTOP)
    frozen, sent_at_freeze = time.monotonic(), sent[0]
    new = site.wait_leader(timeout=15, other_than=first.node)
    target = site.by_name(new.node)
    wait_until(lambda: serves(target, new.epoch), 10, "the new leader to serve")
    served = time.monotonic()
    at_serve = stats(old, first.epoch)
    time.sleep(max(0.0, frozen + 2 * TTL - time.monotonic()))  # frozen for 2 x TTL, as the issue says
    before_wake = sent[0]
    old.signal_group(signal.SIGCONT)
    woke = time.monotonic()
    wait_until(ended.is_set, 5, "the old proxy to close the client's connection")
    assert before_wake > sent_at_freeze, "the client did not keep sending while the leader was frozen"
    wait_until(lambda: not alive(at_serve["pid"]), 5, "the old leader's external relay to be stopped")
    after = stats(old, first.epoch)
    assert after["received"] == at_serve["received"], (
        f"the old external relay received {after['received'] - at_serve['received']} bytes after the new "
        f"leader served (woken {woke - frozen:.1f} s after the freeze)"
    )
    assert after["last_received_at"] < served
    proxy = relay_doc(old)["snapshot"]
    assert proxy["connections"] == 0 and proxy["closed"].get("gate_shut", 0) >= 1, proxy
    assert not serves(old, first.epoch)
    assert echo_once(target.ip, port)
    print(
        f"client sent {sent[0]} bytes; the old relay got {after['received']}, none after the new one served"
    )


@pytest.mark.long
def test_demotion_by_a_promote_stops_the_external_relay(site_factory):

    site = exec_site(site_factory)
    site.start()
    first = site.wait_leader(timeout=40)
    old = site.by_name(first.node)
    wait_until(lambda: serves(old, first.epoch), 15, "the leader's external relay to serve")
    pid = stats(old, first.epoch)["pid"]
    wait_pool_view(site)
    target = next(a for a in site.agents if a is not old)
    doc = relayctl(target, "promote", target.name, "--reason", "test")
    assert doc["code"] == "accepted", doc
    new = site.wait_leader(timeout=15, other_than=first.node)
    assert new.node == target.name
    wait_until(lambda: not alive(pid), 5, "the demoted leader's external relay to stop")
    wait_until(lambda: serves(target, new.epoch), 10, "the promoted member's external relay to serve")
    assert not serves(old, first.epoch)
    assert not listening(old.ip, relay_port(site)), "the demoted leader's proxy still listens"
    assert echo_once(target.ip, relay_port(site))
    assert f"external relay python (pid {pid}) stopped" in old.log()


@pytest.mark.long
def test_a_crashing_external_relay_restarts_with_backoff_and_serves_only_while_it_accepts(site_factory):
    crashing = ("--listen-after", "1.5", "--exit-after", "1", "--starts", "starts.txt")
    site = exec_site(site_factory, n=1, extra=crashing, RELAY_ATTESTS="0")  # a relay down does not hand off
    agent = site.agents[0]
    starts_file = agent.data_dir / "starts.txt"
    port = relay_port(site)
    site.start()
    lease = site.wait_leader(timeout=40)

    def starts() -> list[float]:
        try:
            return [float(line.split()[1]) for line in starts_file.read_text().splitlines()]
        except (OSError, IndexError, ValueError):
            return []

    for n in (1, 2, 3):
        at = wait_until(lambda n=n: len(starts()) >= n and starts()[n - 1], 30, f"start {n}")
        # Before it listens: not serving, and the proxy forwards nothing (the connection is closed).
        while time.monotonic() < at + 1.2:
            assert not serves(agent, lease.epoch), f"serving before start {n} accepts"
            assert not echo_once(agent.ip, port, timeout=0.3)
            time.sleep(0.1)
        wait_until(lambda: serves(agent, lease.epoch), 3, f"run {n} to serve once it accepts")
        assert echo_once(agent.ip, port)
    times = starts()
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Each run lives 1.5 + 1 s (on the stand-in's clock), then the restart waits the backoff it
    # announced: 0.5 s, then 1 s (doubling). Python's own start-up, slow on a loaded machine,
    # only adds to a gap, so each gap is at least the run plus its wait.
    log = agent.log()
    assert log.index("exited with 7; restart in 0.5 s") < log.index("exited with 7; restart in 1 s")
    assert gaps[0] >= 2.5 + 0.5 and gaps[1] >= 2.5 + 1.0, gaps
    external = relay_doc(agent)["snapshot"]["external"]
    assert external["restarts"] >= 2 and external["last_error"] == "exited with 7", external
