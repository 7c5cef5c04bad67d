"""A real agent started from the old agent's own stk.ini, with old stations on (issue 19, items 2 and 5).

The file is what a site has: headerless keys, the old agent's own keys, the
seed's keys added, in the Windows code page. The agent starts from it, says
once which keys it ignores, warns that RELAY_LEGACY sends the token in clear,
and its relay takes an old station (raw sockets, as docs/relay.md describes it)
and a modern commander (our client library) through the same routing;
``relayctl doctor`` names the legacy session.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from harness import KMSN, ROOT, TOKEN, wait_until
from test_config_legacy import OLD_KEYS
from test_relay_legacy import OLD_MAGIC, OldStation

from relay.client.discovery import Discovery
from relay.client.relay_client import RelayClient
from relay.lease_file import lease_file

pytestmark = pytest.mark.agents


def headerless(agent, extra: dict[str, str]) -> None:
    """Rewrite the agent's ini as the old agent's file: no header, its own keys, CRLF, cp950."""
    values = {}
    for line in agent.ini.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep:
            values[name.strip()] = value.strip()
    old = ("; StkAgent 站台設定\nRELAY_HOST=192.168.1.10\nMIRROR_SRC=W:\\socket\nMIRROR_DST=C:\\STK\\socket\n"
           "SHUTDOWN_FLAG=W:\\socket\\SHUTDOWN.FLG\nUPLOADER_GROUP=A\n")  # fmt: skip
    body = old + "".join(f"{k}={v}\n" for k, v in {**values, **extra}.items())
    agent.ini.write_bytes(body.replace("\n", "\r\n").encode("cp950"))


def doctor(agent) -> dict[str, dict]:
    env = {"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "relayctl", "doctor", "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    return {c["check"]: c for c in json.loads(out.stdout)}


def relay_legacy(agent) -> dict:
    try:
        return json.loads((agent.data_dir / "relay.json").read_text())["snapshot"].get("legacy") or {}
    except (OSError, ValueError, KeyError):
        return {}


def test_an_agent_on_the_old_ini_serves_an_old_station_and_a_modern_commander(site_factory):
    site = site_factory(n=1)
    (agent,) = site.agents
    headerless(agent, {"RELAY_LEGACY": "1", "RELAY_LEGACY_MAGIC": OLD_MAGIC})
    assert not agent.ini.read_bytes().startswith(b"[")
    site.start()
    site.wait_leader(60)
    address = (agent.ip, int(agent.setting("RELAY_PORT")))
    wait_until(lambda: relay_legacy(agent).get("enabled"), 30, "the relay serving with legacy on")
    log = agent.log()
    assert log.count("of the old agent ignored") == 1 and all(k in log for k in OLD_KEYS)
    assert "RELAY_LEGACY = 1" in log and "in clear" in log

    old = OldStation(address)
    reply = old.register("agent", "S007", token=TOKEN)
    assert reply["type"] == "registered", reply

    async def commander() -> None:
        discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
        async with RelayClient(role="commander", kmsn=KMSN, station="C01", token=TOKEN,
                               discovery=discovery) as c:  # fmt: skip
            await c.send_confirmed({"cmd": "ping"}, to="S007", timeout=10)
            got = await asyncio.to_thread(old.get)
            assert got["data"] == {"cmd": "ping"} and got["from"]["station"] == "C01"
            await asyncio.to_thread(old.put, {"type": "send", "data": {"pong": 1}})
            assert (await c.receive(timeout=10)).data == {"pong": 1}

    asyncio.run(asyncio.wait_for(commander(), 60))
    bad = OldStation(address)
    bad.put({"type": "register", "magic": OLD_MAGIC, "role": "agent", "kmsn": KMSN, "station": "S008",
             "token": "guessed-token"})  # fmt: skip
    assert bad.get()["code"] == "bad_auth"
    wait_until(lambda: relay_legacy(agent).get("refused") == {"bad_auth": 1}, 10, "the refusal counted")
    wait_until(lambda: relay_legacy(agent).get("sessions") == 1, 10, "one legacy session in relay.json")
    check = doctor(agent)["legacy stations"]
    assert check["ok"] is True and check.get("warn") is True
    assert "1 legacy sessions" in check["detail"] and "1 refused" in check["detail"]
    assert "in clear" in check["detail"]
    old.close()
