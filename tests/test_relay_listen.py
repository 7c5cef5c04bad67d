"""Where the relay listens (relay.server.listen_set, issue 19): `runrelay` as a real
process on loopback addresses, steered by the files the worker writes
(leadership.json, and addresses.json: what the executors hold for an epoch).

Loopback stands in for the LAN here: every 127.0.0.x is this host's own, like a
VIP that has arrived. tests/test_netns_vip.py moves a real VIP between namespaces.
"""

from __future__ import annotations

import json
import os
import socket

import pytest
from harness import free_pair, listening, wait_until
from test_relay_runrelay import EPOCH, HOST, RelayProc
from test_relay_server import Wire

HELD, OLD = "127.0.0.33", "127.0.0.34"


def hold(proc: RelayProc, *entries: tuple[str, int]) -> None:
    """Write addresses.json as the worker's AddressBook does (atomically)."""
    doc = {"addresses": [{"address": a, "epoch": e, "kind": "vip", "executor": "vip", "target": a}
                         for a, e in entries]}  # fmt: skip
    tmp = proc.data_dir / ".addresses.json.tmp"
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, proc.data_dir / "addresses.json")


def listen_states(proc: RelayProc) -> dict[str, str]:
    return {e["address"]: e["state"] for e in proc.status().get("snapshot", {}).get("listen", [])}


@pytest.fixture
def relay_at(tmp_path):
    made: list[RelayProc] = []

    def make(port: int | None = None, **env: str) -> RelayProc:
        proc = RelayProc(tmp_path)
        proc.port = port or free_pair(HOST, HELD, OLD, "127.0.0.1")
        proc.extra_env = {f"STK_{k}": v for k, v in env.items()}
        made.append(proc)
        proc.write_state()
        proc.start()
        wait_until(proc.serving, 20, "runrelay to serve")
        return proc

    yield make
    for proc in made:
        proc.kill()
        if proc.proc is not None:
            print("runrelay stdout/stderr:", *proc.output(), sep="\n")


def test_it_listens_on_an_address_held_for_its_epoch_and_stops_when_the_address_leaves(relay_at):
    proc = relay_at()
    port = proc.port
    assert listen_states(proc) == {HOST: "listening"}  # NODE_IP is loopback: no 127.0.0.1 listener (auto)
    assert not listening("127.0.0.1", port)

    hold(proc, (HELD, EPOCH), (OLD, EPOCH - 1))  # one for this epoch; one a crash of epoch 6 left behind
    wait_until(lambda: listen_states(proc).get(HELD) == "listening", 5, "the relay on the held address")
    assert listening(HELD, port) and listening(HELD, port + 1)  # both ports
    assert OLD not in listen_states(proc) and not listening(OLD, port)
    via_held = Wire((HELD, port))
    assert via_held.register("agent", "S002")["type"] == "registered"
    via_node = proc.client("commander", "C01")
    via_node.send({"n": 1}, to="S002", id="m1")
    assert via_held.frame()["data"] == {"n": 1}

    (proc.data_dir / "addresses.json").unlink()  # the executor released it
    wait_until(lambda: HELD not in listen_states(proc), 5, "the relay to let go of the address")
    assert not listening(HELD, port) and not listening(HELD, port + 1)
    assert via_held.eof()  # what was accepted there goes too: its packets would go elsewhere now
    via_node.assert_nothing_pending()  # NODE_IP serves on, its sessions untouched
    assert proc.status()["listening"] is True and proc.proc.poll() is None


def test_with_relay_loopback_on_and_no_door_it_listens_on_127_0_0_1_and_retries_a_bind_that_failed(relay_at):
    port = free_pair(HOST, "127.0.0.1")
    squatter = socket.socket()  # something else holds 127.0.0.1's passthrough port
    squatter.bind(("127.0.0.1", port + 1))
    squatter.listen()
    try:
        # RELAY_FORWARD = off: no station door holds 127.0.0.1, so the relay listens there itself
        proc = relay_at(port=port, RELAY_LOOPBACK="on", RELAY_FORWARD="off")  # serves on NODE_IP all the same
        wait_until(lambda: listen_states(proc).get("127.0.0.1") == "failed", 5, "the loopback failure shown")
        [entry] = [e for e in proc.status()["snapshot"]["listen"] if e["address"] == "127.0.0.1"]
        assert entry["why"] == "loopback" and "in use" in entry["error"], entry
        assert not listening("127.0.0.1", port)  # the JSON port of a half-bound address is let go as well
    finally:
        squatter.close()
    wait_until(lambda: listen_states(proc).get("127.0.0.1") == "listening", 5, "the retried bind")
    wire = Wire(("127.0.0.1", port))  # the leader's own agent, as seed 000 §3.6 has it dial
    assert wire.register("agent", "S002")["type"] == "registered"


def test_with_the_station_door_on_the_relay_leaves_127_0_0_1_to_it(relay_at):
    port = free_pair(HOST, "127.0.0.1")
    proc = relay_at(port=port, RELAY_LOOPBACK="on")  # RELAY_FORWARD = loopback (the default): the door's
    wait_until(lambda: listen_states(proc).get(HOST) == "listening", 10, "NODE_IP listening")
    assert "127.0.0.1" not in listen_states(proc)
    assert not listening("127.0.0.1", port) and not listening("127.0.0.1", port + 1)
