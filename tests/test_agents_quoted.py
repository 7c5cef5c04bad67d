"""Issue 40's findings 8 and 9 with a real agent: text from refused records reaches the webhook,
the log, pool.json (what the panel and the API read) and `relayctl doctor` only in the safe
alphabet; and the site's own commands (ON_ROLE_CHANGE, GATE_CMD, HEALTH_CMD, RELAY_EXEC) run
without the secrets the agent was given in its environment, as the container image gives them.
Without agents: tests/test_quoted_text.py, tests/test_site_command_env.py."""

import json
import os
import secrets
import shlex
import socket

import pytest
from harness import KMSN, PY, ROOT, free_port, wait_until
from test_agents_beacons import doctor, pool_view
from test_agents_notify import SECRET, Receiver, role_script
from test_site_command_env import agent_secrets, leaked

from elections.core.evidence import SAFE, UNSAFE
from elections.core.lease import LeaseRecord

pytestmark = pytest.mark.agents

PHISH = "@channel <https://evil.example|Re-authenticate\u202e now>\n"
QUOTED = "?channel ?https://evil.example?Re-authenticate\\u202e now?"  # PHISH as it may be shown


def safe(text: str) -> bool:
    return set(text) <= SAFE | {UNSAFE}


def forged_lease(lease_dir, node: str) -> None:
    """A lease naming `node`, signed with a key that is not the pool's (a share writer without it)."""
    rec = LeaseRecord(kmsn=KMSN, station="S009", ip="127.0.0.99", port=9530, pid=4242, epoch=5,
                      lease_until="20990101000000", node=node, renew_seq=1, ttl_s=3)  # fmt: skip
    tmp = lease_dir / ".planted.tmp"
    tmp.write_bytes(rec.encode("not-the-pool-key-" + secrets.token_hex(8)))
    os.replace(tmp, lease_dir / "relay_leader.json")


def keyless_beacon(ip: str, port: int, node: str) -> None:
    doc = {"v": 1, "kmsn": KMSN, "node": node, "ip": ip, "port": 9530, "role": "leader", "epoch": 999,
           "renew_seq": 1, "boot": "0" * 16, "seq": 1, "sig": "00" * 32}  # fmt: skip
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(json.dumps(doc).encode(), (ip, port))


@pytest.mark.long
def test_text_of_refused_records_reaches_the_webhook_the_log_the_view_and_doctor_only_as_safe_words(
    site_factory,
):
    receiver = Receiver()
    try:
        site = site_factory(1, extra={"WEBHOOK_URL": receiver.url, "WEBHOOK_SECRET": SECRET,
                                      "WEBHOOK_SECURITY_EVERY": "1"})  # fmt: skip
        site.start()
        agent = site.agents[0]
        wait_until(lambda: receiver.events("elected"), 40, "the election's POST")
        # A keyless LAN host's beacon, and a share writer's lease without the key, both naming PHISH.
        keyless_beacon(agent.ip, int(agent.setting("RELAY_PORT")) + 2, PHISH)
        forged_lease(site.lease_dir, PHISH)

        def refused():
            recent = pool_view(agent).get("refusals", {}).get("recent", [])
            causes = {(r["source"].split(" ")[0], r["cause"]) for r in recent}
            return recent if {("beacon", "forged"), ("relay_leader.json", "forged")} <= causes else None

        recent = wait_until(refused, 20, "both refusals in the agent's view")

        def posted():
            quoted = [r for _, b in receiver.events("security") for r in json.loads(b)["detail"]["recent"]]
            return quoted if sum(QUOTED in r["detail"] for r in quoted) >= 2 else None

        quoted = wait_until(posted, 20, "both refusals posted, quoted")
        # The webhook's bodies: not one character of the markup, whatever the JSON decoder.
        for _, body in receiver.events("security"):
            for bad in (b"@channel", b"<https", b"|", "\u202e".encode(), b"\\u202e now>"):
                assert bad not in body, (bad, body)
        for r in quoted:
            assert all(safe(r[k]) for k in ("source", "cause", "detail", "last_at")), r
        # pool.json: what the panel's banner, the site API and doctor show.
        assert all(safe(r["source"]) and safe(r["detail"]) for r in recent), recent
        assert sum(QUOTED in r["detail"] for r in recent) == 2, recent
        # relayctl doctor's lines.
        lines = {name: detail for name, (ok, detail) in doctor(agent).items() if name.startswith("refused ")}
        assert any(QUOTED in d for d in lines.values()) and all(safe(d) for d in lines.values()), lines
        # The agent's log: the refused lease is logged, quoted; the markup never.
        log = wait_until(lambda: QUOTED in agent.log() and agent.log(), 10, "the refusal's log line")
        assert "@channel" not in log and "\u202e" not in log and "<https" not in log
    finally:
        receiver.stop()


@pytest.mark.long
def test_the_sites_own_commands_run_without_the_secrets_the_agent_was_given(site_factory, tmp_path):
    env = agent_secrets()
    for key in ("CLOUD_TOKEN", "WEBHOOK_SECRET", "SMB_PASSWORD"):  # each wants a key this agent has not
        del env[f"STK_{key}"]
    dumps = {hook: tmp_path / f"{hook}.env" for hook in ("role", "gate", "health", "relay")}
    standin = ROOT / "tests" / "standin_relay.py"
    relay = shlex.join(["/bin/sh", "-c", f"env > {dumps['relay']}; exec {PY} {standin} "
                        "--host {host} --port {port} --passthrough-port {passthrough_port}"])  # fmt: skip
    token = "relay-" + secrets.token_hex(16)
    env["STK_RELAY_TOKEN"] = token  # the pool's own, given in the environment too
    env["SITE_COPY"] = f"--token {token}"
    site = site_factory(1, token=token, extra={
        "ON_ROLE_CHANGE": role_script(tmp_path / "role.sh", f"env > {dumps['role']}\n"),
        "GATE_CMD": role_script(tmp_path / "gate.sh", f"env > {dumps['gate']}\n"),
        "HEALTH_CMD": f"env > {dumps['health']}",
        "RELAY_KIND": "exec", "RELAY_EXEC": relay,
    })  # fmt: skip
    agent = site.agents[0]
    with open(agent.ini, "a") as f:
        f.write(f"RELAY_EXEC_LISTEN = {agent.ip}:{free_port()}\n")
    agent.env = {**env, "SITE_MARKER": "kept"}
    site.start()
    # The agent itself has its secrets (it leads with the pool key of its environment)...
    wait_until(lambda: agent.state().get("leader"), 40, "the agent leading")
    # ...and each of the four commands ran, without one of them.
    for hook, path in dumps.items():
        dump = wait_until(
            lambda p=path: p.exists() and p.read_bytes(), 30, f"the {hook} command's environment"
        )
        assert leaked(dump, env) == [], (hook, leaked(dump, env))
        assert b"\nSITE_MARKER=kept\n" in b"\n" + dump, hook
    assert b"\nSTK_ROLE=leader\n" in b"\n" + dumps["role"].read_bytes()
