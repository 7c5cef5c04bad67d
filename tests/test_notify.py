"""The notifier alone against a real receiver on loopback: a full queue drops its oldest and counts
it, failures are audited at most once a minute, a change while the role command runs is coalesced,
a redirect is never followed (a 3xx is not a delivery)."""

import http.server
import json
import threading
import time

import pytest
from harness import free_port, wait_until
from test_agents_notify import SECRET, Receiver, role_script

from elections.runtime.notify import Notifier, Roles, payload
from stkconfig.parsed import NotifyConfig
from stkhost.retry import Backoff


def notifier(url="", audit=None, **kw):
    cfg = NotifyConfig(webhook_url=url, webhook_secret=SECRET, webhook_timeout=30, **kw)
    rows = [] if audit is None else audit
    return Notifier(cfg, "9999-9999-99-99", "S001", audit=lambda n, *row: rows.append(row),
                    backoff=Backoff(tries=2))  # fmt: skip


def offer(n, seq, kind="elected", **extra):
    """One history row of this node, as the feed hands it on (notify_feed.EventFeed)."""
    n.post([payload(n.kmsn, n.node, seq, kind, 3, "why", "2026-12-02T00:00:00+00:00", extra)], cursor=seq)


def change(n, roles, seq, kind):
    role = roles.fold(kind, n.node, {})
    if role is not None:
        n.role_changed(role, seq, kind)


def test_a_full_queue_drops_its_oldest_event_counts_and_audits_it():
    receiver = Receiver(hang=True)
    rows = []
    try:
        n = notifier(receiver.url, audit=rows, webhook_queue=2)
        offer(n, 1)
        assert receiver.held.wait(10)  # the first is in flight, held by the receiver (still queued)
        for seq in range(2, 6):
            offer(n, seq)
        assert n.counters.dropped == 3  # 1 (in flight: sent, but no longer kept for a retry), 2, 3
        assert [d["seq"] for d in n.outbox._docs] == [4, 5]
        offer(n, 5)  # the same row again (a feed going on from its cursor): queued once
        assert n.counters.dropped == 3 and len(n.outbox) == 2
        assert len(rows) == 1 and rows[0][0] == "webhook" and "dropped" in rows[0][2], rows
    finally:
        receiver.stop()


def test_failures_are_counted_each_and_audited_once_a_minute():
    receiver = Receiver(statuses=[500] * 6)
    rows = []
    try:
        n = notifier(receiver.url, audit=rows)
        for seq in (1, 2, 3):
            offer(n, seq)
        wait_until(lambda: n.counters.failed == 3, 20, "three events given up")
        assert len(receiver.posts) == 6  # two tries each, same id each time
        ids = [json.loads(b)["id"] for _, b in receiver.posts]
        assert ids == [i for i in ids[::2] for _ in (0, 1)]
        assert len(rows) == 1 and rows[0][0] == "webhook" and "HTTP 500" in rows[0][2], rows
    finally:
        receiver.stop()


def test_role_changes_coalesce_while_the_command_runs(tmp_path):
    out = tmp_path / "roles.txt"
    gate = tmp_path / "go"
    script = role_script(
        tmp_path / "r.sh", f'echo "$1" >> {out}\nwhile [ ! -e {gate} ]; do sleep 0.05; done\n'
    )
    n = notifier(role_cmd=(script,), role_timeout=30)
    roles = Roles(n.node)
    change(n, roles, 1, "elected")
    wait_until(lambda: out.exists() and out.read_text() == "leader\n", 10, "the first run")
    change(n, roles, 2, "stepped_down")
    change(n, roles, 3, "elected")
    change(n, roles, 4, "released")  # three changes while the first run waits: only the newest runs next
    gate.touch()
    wait_until(lambda: n.counters.role_runs == 2 and out.read_text() == "leader\nfollower\n", 10, "two runs")
    assert n.counters.role_failed == 0


class Trap:
    """A server on 127.0.0.1 that must receive nothing: it records any request, whatever its method."""

    def __init__(self):
        self.requests: list[tuple[str, str, dict]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                owner.requests.append((self.command, self.path, dict(self.headers)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_HEAD = _any

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/steal"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_never_followed_and_the_event_is_not_delivered(code):
    trap = Trap()
    receiver = Receiver(statuses=[code] * 2, location=trap.url)
    rows = []
    try:
        n = notifier(receiver.url, audit=rows)
        offer(n, 1)
        wait_until(lambda: n.counters.failed == 1, 20, "the event given up")
        # Both tries went to WEBHOOK_URL, signed; not one request reached where the 3xx pointed.
        assert len(receiver.posts) == 2 and receiver.posts[0][1] == receiver.posts[1][1]
        assert trap.requests == []
        assert (n.counters.sent, len(n.outbox)) == (0, 0)
        (row,) = rows
        why = f"HTTP {code}, a redirect to {trap.url}: not followed"
        assert row[0] == "webhook" and "(elected) not delivered, 2 tries: " + why in row[2], row
    finally:
        receiver.stop()
        trap.stop()


def test_a_redirect_then_a_2xx_at_the_same_url_is_delivered_there_once():
    trap = Trap()
    receiver = Receiver(statuses=[302], location=trap.url)  # the retry is answered 200
    try:
        n = notifier(receiver.url)
        offer(n, 1)
        wait_until(lambda: n.counters.sent == 1, 20, "the event delivered")
        assert len(receiver.posts) == 2 and trap.requests == [] and n.counters.failed == 0
    finally:
        receiver.stop()
        trap.stop()


def test_an_event_waiting_out_its_retry_does_not_hold_the_events_behind_it_and_each_try_is_logged(
    tmp_path, caplog
):
    # Issue 42: a failing receiver was retried silently and held every event behind it for 16 s.
    import logging

    from elections.runtime.notify import read_queue

    receiver = Receiver(statuses=[503])  # the first POST fails, every later one is answered 200
    try:
        cfg = NotifyConfig(webhook_url=receiver.url, webhook_secret=SECRET, webhook_timeout=30)
        with caplog.at_level(logging.WARNING, logger="stkrelay.notify"):
            n = Notifier(cfg, "9999-9999-99-99", "S001", audit=lambda *row: None,
                         backoff=Backoff(tries=3, first=2.0, factor=2.0), data_dir=str(tmp_path))  # fmt: skip
            offer(n, 1)
            wait_until(lambda: len(receiver.posts) == 1, 10, "the first try")
            offer(n, 2)
            # Event 2 is delivered while event 1 waits out its 2 s backoff.
            wait_until(lambda: n.counters.sent == 1, 1.5, "the event behind the failing one")
            assert [json.loads(b)["seq"] for _, b in receiver.posts] == [1, 2]
            assert read_queue(str(tmp_path), time.monotonic())[0] == 1  # event 1 waits
            wait_until(lambda: n.counters.sent == 2, 10, "the retry")
        assert [json.loads(b)["seq"] for _, b in receiver.posts] == [1, 2, 1]
        said = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
        assert len(said) == 1, said  # once per failed try
        assert "(HTTP 503), try 1 of 3; next try in 2.0 s" in said[0], said
        wait_until(lambda: read_queue(str(tmp_path), 0.0) == (0, 0.0), 5, "the queue's metric to empty")
    finally:
        receiver.stop()


def test_a_receiver_that_is_down_is_sent_at_most_a_few_events_at_once():
    from elections.runtime.notify import RETRYING

    receiver = Receiver(statuses=[500] * 100)
    try:
        cfg = NotifyConfig(webhook_url=receiver.url, webhook_secret=SECRET, webhook_timeout=30)
        n = Notifier(cfg, "9999-9999-99-99", "S001", audit=lambda *row: None,
                     backoff=Backoff(tries=8, first=30.0))  # fmt: skip
        for seq in range(1, 11):
            offer(n, seq)
        wait_until(lambda: len(receiver.posts) == RETRYING, 10, "the first tries")
        time.sleep(0.5)
        assert len(receiver.posts) == RETRYING and len(n.outbox) == 10  # the rest wait their turn
    finally:
        receiver.stop()
