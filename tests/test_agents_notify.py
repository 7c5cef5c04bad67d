"""ON_ROLE_CHANGE and WEBHOOK_URL with real agents, a real HTTP receiver on loopback and real scripts."""

import hashlib
import hmac
import http.server
import json
import os
import re
import sqlite3
import stat
import threading

import pytest
from harness import KMSN, free_port, wait_until
from test_agents_audit import relayctl

pytestmark = pytest.mark.agents

SECRET = "notify-test-secret-0123456789"


class Receiver:
    """A webhook receiver on 127.0.0.1: answers each POST with the next of `statuses` (then 200), or
    holds it open until `release` is set when `hang`; a 3xx names `location`."""

    def __init__(self, statuses=(), hang=False, location=None):
        self.posts: list[tuple[dict, bytes]] = []
        self.statuses = list(statuses)
        self.hang = hang
        self.location = location
        self.release = threading.Event()
        self.held = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                owner.posts.append((dict(self.headers), body))
                if owner.hang:
                    owner.held.set()
                    owner.release.wait(60)
                code = owner.statuses.pop(0) if owner.statuses else 200
                self.send_response(code)
                if owner.location and 300 <= code < 400:
                    self.send_header("Location", owner.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def events(self, kind):
        return [(h, b) for h, b in self.posts if json.loads(b)["kind"] == kind]


def role_script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def audit_rows(agent):
    db = sqlite3.connect(f"file:{agent.data_dir / 'stkrelay.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        sql = "SELECT action, phase, result, message FROM elections_auditentry ORDER BY seq"
        return db.execute(sql).fetchall()
    finally:
        db.close()


@pytest.fixture
def receiver_factory():
    made = []

    def make(**kw):
        made.append(Receiver(**kw))
        return made[-1]

    yield make
    for r in made:
        r.stop()


@pytest.mark.long
def test_a_failover_is_posted_signed_retried_with_its_id_and_runs_the_role_command(
    site_factory, receiver_factory, tmp_path
):
    receiver = receiver_factory(statuses=[500])  # the first POST is refused, the retry accepted
    secret_file = tmp_path / "webhook.secret"
    secret_file.write_text(SECRET + "\n")
    out = tmp_path / "roles.txt"
    script = role_script(tmp_path / "on-role.sh", f'echo "$* | $STK_ROLE $STK_NODE" >> {out}\n')
    site = site_factory(2, extra={"WEBHOOK_URL": receiver.url, "WEBHOOK_SECRET_FILE": str(secret_file),
                                  "ON_ROLE_CHANGE": script, "BEACON_INTERVAL": "0"})  # fmt: skip
    site.start()
    first = site.wait_leader(timeout=40)
    wait_until(lambda: len(receiver.events("elected")) >= 2, 20, "the retried POST")
    elected = receiver.events("elected")
    (h1, b1), (h2, b2) = elected[:2]
    assert b1 == b2, "a retry sends the same event"
    for headers, body in elected:
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["X-Stkrelay-Signature"], expected)
    doc = json.loads(b1)
    assert h1["X-Stkrelay-Delivery"] == h2["X-Stkrelay-Delivery"] == doc["id"]
    assert doc["id"] == f"{KMSN}/{first.node}/{doc['seq']}"
    assert (doc["kmsn"], doc["node"], doc["kind"], doc["epoch"]) == (KMSN, first.node, "elected", first.epoch)
    assert {"reason", "at", "detail"} <= set(doc) and doc["detail"]["cause"]
    # The role command ran on the leader with its documented arguments and environment.
    line = f"leader {first.epoch} {KMSN} {first.node} {doc['detail']['cause']} | leader {first.node}"
    wait_until(lambda: out.exists() and line in out.read_text(), 10, "the role command's line")
    # A failover: the other agent takes over and posts its own election, once (no 500 left).
    site.by_name(first.node).kill9()
    new = site.wait_leader(timeout=20, other_than=first.node)
    wait_until(lambda: any(json.loads(b)["epoch"] == new.epoch for _, b in receiver.events("elected")),
               20, "the failover's POST")  # fmt: skip
    firsts = [b for _, b in receiver.events("elected") if json.loads(b)["epoch"] == first.epoch]
    assert len(firsts) == 2, "the refused POST was delivered once more, not again after the 200"
    posted = [json.loads(b) for _, b in receiver.events("elected") if json.loads(b)["epoch"] == new.epoch]
    assert posted[0]["node"] == new.node and posted[0]["detail"]["cause"]
    wait_until(
        lambda: f"leader {new.epoch} {KMSN} {new.node} " in out.read_text(), 10, "the new leader's line"
    )
    # Its counters on its /metrics (loopback): the event sent, none failed or dropped.
    winner = site.by_name(new.node)

    def sample(outcome):
        text = winner.urlopen("/metrics").read().decode()
        found = re.search(
            rf'^stkrelay_webhook_events_total{{kmsn="{KMSN}",outcome="{outcome}"}} (\S+)$', text, re.M
        )
        return float(found.group(1)) if found else None

    wait_until(lambda: (sample("sent") or 0) >= 1, 10, "the sent counter")
    assert (sample("failed"), sample("dropped")) == (0, 0)
    # An operator command from another process (relayctl) is posted by the agent's worker too.
    code, out = relayctl(winner, "pause", "--reason", "notify test")
    assert code == 0 and out["result"] == "accepted", out
    wait_until(lambda: receiver.events("pause_requested"), 15, "the pause's POST")
    (headers, body), *_ = receiver.events("pause_requested")
    paused = json.loads(body)
    assert (paused["node"], paused["reason"], paused["kind"]) == (new.node, "notify test", "pause_requested")
    assert paused["detail"]["actor"] and paused["detail"]["correlation"], paused
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Stkrelay-Signature"] == expected


def test_a_hung_receiver_never_delays_renewal_and_a_slow_role_command_is_killed_and_audited(
    site_factory, receiver_factory, tmp_path
):
    receiver = receiver_factory(hang=True)
    pid_file = tmp_path / "role.pid"
    script = role_script(tmp_path / "slow.sh", f"echo $$ > {pid_file}\nexec sleep 60\n")
    site = site_factory(1, extra={"WEBHOOK_URL": receiver.url, "WEBHOOK_SECRET": SECRET,
                                  "WEBHOOK_TIMEOUT": "60", "ON_ROLE_CHANGE": script,
                                  "ON_ROLE_CHANGE_TIMEOUT": "1", "BEACON_INTERVAL": "0"})  # fmt: skip
    site.start()
    lease = site.wait_leader(timeout=40)
    agent = site.agents[0]
    assert receiver.held.wait(20), "the receiver never got the election's POST"
    # The POST hangs (for 60 s); renewals (every 1 s) keep coming all the same.
    seq = (site.lease() or lease).renew_seq
    wait_until(lambda: (site.lease() or lease).renew_seq >= seq + 5, 15, "five renewals while the POST hangs")
    assert not receiver.release.is_set() and len(receiver.posts) == 1
    # The role command overran its 1 s: its process group killed, an audit row written.
    pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 10, "the script's pid"))
    wait_until(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), 10, "the script killed")

    def audited():
        return [r for r in audit_rows(agent) if r[0] == "on_role_change"]

    wait_until(lambda: len(audited()) >= 2, 10, "the audit rows")
    rows = audited()
    assert [r[1] for r in rows] == ["intent", "outcome"], rows
    assert rows[1][2] == "error" and "timed out after 1 s" in rows[1][3], rows
    assert agent.state().get("leader") is True


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
