"""Cross-site commanders (issue 26 part 2): a cloud-side grant names the KMSNs a head
office's commander may reach through the cloud; real cloud, real site relays with their
tunnels, real sockets (`cloudrig.Rig`)."""

import asyncio
import logging

from cloudrig import CLOUD_IP, KMSN, OTHER, SITE_IP, TOKEN, Rig, json_client, until

from relay.cloud.config import load
from relay.cloud.grants import Grant
from relay.wire.auth import auth_digest, new_nonce
from relay.wire.client_connection import ClientConnection
from relay.wire.events import ErrorReceived, Message, Registered

GRANT_TOKEN = "head-office-grant-0123456789abcdef"
BOTH = Grant("head-office", GRANT_TOKEN, frozenset({KMSN, OTHER}))
ONE = Grant("branch", "branch-grant-0123456789abcdefgh", frozenset({KMSN}))
UNSERVED = "0000-0000-00-00"  # a KMSN this cloud has no [site:] for


async def commander(port, kmsn, grant=None, station="C01"):
    """A commander at the cloud for `kmsn`, with `grant`'s proof in its register: its
    connection once registered, or the error the cloud (or the site) answered."""
    reader, writer = await asyncio.open_connection(CLOUD_IP, port)

    def proof(nonce):
        return {"grant": grant.name, "grant_auth": auth_digest(grant.token, nonce, "grant", kmsn, station)}

    conn = ClientConnection(role="commander", kmsn=kmsn, station=station, token=TOKEN, cnonce=new_nonce(),
                            extra=proof if grant else None)  # fmt: skip
    while True:
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, "closed without an answer"
        conn.receive_data(data)
        writer.write(conn.data_to_send())
        for event in conn.events_received():
            if isinstance(event, Registered | ErrorReceived):
                return reader, writer, conn, event


async def delivered(agent, text):
    reader, _, conn = agent
    while True:
        conn.receive_data(await asyncio.wait_for(reader.read(65536), 5))
        got = [e for e in conn.events_received() if isinstance(e, Message)]
        if got:
            return got[0].obj["data"] == text


def test_a_two_site_grant_reaches_both_sites_and_a_one_site_grant_is_refused_the_second(tmp_path, caplog):
    async def scenario():
        rig = Rig(tmp_path, grants={g.name: g for g in (BOTH, ONE)})
        await rig.start()
        agents = {}
        for kmsn in (KMSN, OTHER):
            server, tunnel = await rig.site("S001", 7, kmsn=kmsn)
            await until(lambda t=tunnel: t.state == "connected", 5, f"the tunnel of {kmsn}")
            agents[kmsn] = await json_client(SITE_IP, server.addresses["json"][1], "agent", "S101", kmsn=kmsn)
        writers = []
        for kmsn in (KMSN, OTHER):  # the head office's commander reaches each site's agent
            _, writer, conn, answer = await commander(rig.cfg.relay_port, kmsn, BOTH)
            assert isinstance(answer, Registered) and answer.kmsn == kmsn
            conn.send_message(kmsn, to="S101", id="m1")
            writer.write(conn.data_to_send())
            assert await delivered(agents[kmsn], kmsn)
            writers.append(writer)
        _, writer, _, answer = await commander(rig.cfg.relay_port, KMSN, ONE)
        assert isinstance(answer, Registered)
        writers.append(writer)
        with caplog.at_level(logging.WARNING, "stkrelay.cloud"):
            _, writer, _, answer = await commander(rig.cfg.relay_port, OTHER, ONE)
        assert isinstance(answer, ErrorReceived) and answer.code == "wrong_kmsn"
        assert "grant_unlisted" in caplog.text and OTHER in caplog.text
        # A commander without a grant, or with a forged proof, is refused at the cloud too.
        _, w2, _, missing = await commander(rig.cfg.relay_port, KMSN)
        forged = Grant(BOTH.name, "not-the-grant-token-0123456789ab", BOTH.kmsns)
        _, w3, _, bad = await commander(rig.cfg.relay_port, KMSN, forged)
        assert (missing.code, bad.code) == ("bad_auth", "bad_auth")
        counters = rig.cloud.status()["counters"]
        assert [counters[c] for c in ("grant_unlisted", "grant_missing", "grant_bad_auth")] == [1, 1, 1]
        assert rig.cloud.status()["pools"][OTHER]["remote_clients"] == 1  # only the head office's
        for w in (*writers, writer, w2, w3, *(a[1] for a in agents.values())):
            w.close()
        await rig.stop()

    asyncio.run(scenario())


def test_a_commander_without_a_grant_learns_no_kmsn_the_cloud_serves(tmp_path):
    """At a cloud with grants, a commander without one (or with a forged one) gets bad_auth for a KMSN
    the cloud serves and for one it does not alike; only a grant that verifies hears wrong_kmsn."""

    async def scenario():
        lister = Grant("lister", "lister-grant-0123456789abcdefgh", frozenset({UNSERVED}))
        rig = Rig(tmp_path, grants={g.name: g for g in (BOTH, lister)})
        await rig.start()
        forged = Grant(BOTH.name, "not-the-grant-token-0123456789ab", frozenset({UNSERVED}))
        answers = []
        for kmsn in (UNSERVED, KMSN):
            for grant in (None, forged):
                _, writer, _, answer = await commander(rig.cfg.relay_port, kmsn, grant)
                answers.append((answer.code, answer.message))
                writer.close()
        assert answers[0] == answers[2] and answers[1] == answers[3], answers
        assert {code for code, _ in answers} == {"bad_auth"} and UNSERVED not in str(answers)
        counters = rig.cloud.status()["counters"]
        assert (counters["grant_missing"], counters["grant_bad_auth"]) == (2, 2)
        _, writer, _, answer = await commander(rig.cfg.relay_port, UNSERVED, lister)
        assert answer.code == "wrong_kmsn"  # a verified grant naming a KMSN this cloud does not serve
        writer.close()
        await rig.stop()

    asyncio.run(scenario())


def test_grants_are_read_from_cloud_ini_and_a_bad_one_is_a_problem(tmp_path):
    key = "ab" * 32
    (tmp_path / "cloud.ini").write_text(
        f"[cloud]\nDATA_DIR = {tmp_path}\n"
        f"[site:{KMSN}]\nCLOUD_TOKEN = cloud-token-0123456789\nLEASE_KEY = {key}\n"
        f"[site:{OTHER}]\nCLOUD_TOKEN = cloud-token-other-site-0123\nLEASE_KEY = {key}\n"
        f"[grant:head-office]\nTOKEN = {GRANT_TOKEN}\nKMSNS = {KMSN}, {OTHER}\n"
        f"[grant:weak]\nTOKEN = short\nKMSNS = {KMSN}\n"
        f"[grant:stray]\nTOKEN = {GRANT_TOKEN}x\nKMSNS = {KMSN}, 2222-2222-22-22\n"
    )
    cfg = load(str(tmp_path / "cloud.ini"))
    assert cfg.grants == {"head-office": BOTH}
    assert sorted(p.key for p in cfg.problems if p.id == "stkrelay.E210") == ["[grant:stray]", "[grant:weak]"]
