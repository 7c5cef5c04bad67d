"""Stored XSS: every field an outsider can set, rendered in real Chromium.

Hostile text comes in only by the paths an outsider has: the JSON API with a
bearer token (reasons, targets), the login form (user names of failed logins),
a relay registration with the site token (station names), files planted on the
share without the key (names of refused files), and records signed with a
watched pool's key as any member of that pool could write them (the lease's
holder, station, address and KMSN; heartbeats' health and version; event
reasons and actors; published audit rows). A user with a hostile name made
with `stkuser` (which, unlike the form, takes any name) acts through the API.

Every page that shows these is then rendered twice: with the panel's CSP (no
`securitypolicyviolation` event, no CSP console error may occur) and with CSP
bypassed (so escaping alone is tested: the `window.__xss` canary set by every
payload must stay unset). Each payload must be on the page as text (the text a
refused record quotes, e.g. a planted file's name, as `evidence.printable` reduces
it: issue 40). The CSV export's cells must never start with `= + - @`.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import threading
import urllib.parse
from pathlib import Path

import pytest
from harness import CHROMIUM, KMSN, TOKEN, Site, wait_until
from harness import CHROMIUM_ARGS as ARGS
from poolsim import SimPool, Ticker, pool_section
from test_browser import PASSWORD, stkuser

from elections.core.evidence import DETAIL_CHARS, printable

pytestmark = pytest.mark.agents

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
if CHROMIUM is None:
    pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)", allow_module_level=True)

HOSTILE = "4444-4444-44-44"  # a watched pool whose members write hostile (validly signed) records
HOSTILE_KEY = "hostile-pool-key-0123456789"


def long_payload(tag: str) -> str:
    """Every vector at once; `tag` says which field it came through."""
    return (
        f"{tag}:\"'><img src=x onerror=__xss=1><svg onload=__xss=1><script>__xss=1</script>"
        f'<a href="javascript:__xss=1">j</a>{{{{7*7}}}}${{7*7}}'
    )


def short_payload(tag: str) -> str:
    """For fields of at most 64 characters, and file names (no '/')."""
    return f"{tag}:\"'><img src=x onerror=__xss=1>{{{{7*7}}}}"


# The hostile KMSN of a watched pool (an `[pool:...]` section allows no space, '/' or '\').
ODD_KMSN = "K<b>\"'&{{7*7}}<i>"

INIT = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " " + e.blockedURI + " " + (e.sample || ""));
});
"""


class HostilePool(SimPool):
    """A pool whose members sign what a hostile member would write."""

    def renew(self, ttl_s: float = 10) -> None:
        from elections.core.lease import LeaseRecord

        self.renew_seq += 1
        rec = LeaseRecord(
            kmsn=short_payload("lease-kmsn"), station=long_payload("lease-station"),
            ip=long_payload("lease-ip"), port=self.port, pid=4242, epoch=self.epoch,
            lease_until="20990101000000", node=long_payload("lease-node"),
            renew_seq=self.renew_seq, ttl_s=ttl_s,
        )  # fmt: skip
        (self.dir / "relay_leader.json").write_bytes(rec.encode(self.key))

    def heartbeat(self, node: str, **fields: object) -> None:
        hostile = {"health": long_payload("health"), "version": long_payload("version"),
                   "ip": short_payload("member-ip")}  # fmt: skip
        super().heartbeat(node, **hostile, **fields)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("xss")
    s = Site(root / "site", n=2, first_ip=141)
    hostile = HostilePool(root / "h" / "socket", HOSTILE, HOSTILE_KEY, members=3)
    odd = SimPool(root / "o" / "socket", ODD_KMSN, "odd-kmsn-pool-key-0123456789", members=2)
    odd.elect("S001")
    for a in s.agents:
        with open(a.ini, "a") as fh:
            fh.write(pool_section(HOSTILE, hostile.dir, hostile.key, NODE="OFFICE1"))
            fh.write(pool_section(ODD_KMSN, odd.dir, odd.key, NODE="OFFICE1"))
    write_hostile_history(hostile)
    plant_odd_files(s.lease_dir)
    plant_odd_files(hostile.dir)
    ticker = Ticker(hostile, odd)
    try:
        s.start()
        s.wait_settled(60)
        users: list[tuple[Path, tuple[str, ...]]] = []
        for a in s.agents:
            users += [(a.ini, ("add", "olga", "--role", "operator")),
                      (a.ini, ("add", long_payload("user")[:150], "--role", "operator"))]  # fmt: skip
        threads = [threading.Thread(target=stkuser, args=(ini, *args)) for ini, args in users]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        s.hostile = hostile  # type: ignore[attr-defined]
        yield s
    finally:
        ticker.stop()
        s.stop()


@pytest.fixture(autouse=True)
def _logs_on_failure(request, site):
    request.node.stk_sites = [site]  # tests/conftest.py attaches their logs to a failure


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def write_hostile_history(pool: SimPool) -> None:
    """Signed events as a hostile member writes them: elections with hostile
    reasons, a drain with a hostile actor, audit rows with hostile fields."""
    pool.elect("S001", reason=long_payload("elected-reason"))
    pool.event("S003", "drain_requested", long_payload("drain-event-reason"), target="S001",
               actor=long_payload("event-actor"), correlation=short_payload("event-corr"))  # fmt: skip
    pool.elect("S002", reason="=cmd|' /C calc'!A0")
    pool.event("S002", "stepped_down", long_payload("stepped-reason"))
    for seq, phase in ((1, "intent"), (2, "outcome")):
        row = {"seq": seq, "at": "2026-01-01T00:00:00.000000+00:00", "phase": phase,
               "user": long_payload("audit-user")[:150], "client": long_payload("audit-client")[:200],
               "via": "<b>v</b>", "action": "<b>drain</b>", "kmsn": short_payload("audit-kmsn")[:64],
               "target": short_payload("audit-target")[:64], "reason": long_payload("audit-reason"),
               "expected_epoch": 1, "force": False, "result": "<i>ok</i>" if phase == "outcome" else "",
               "message": long_payload("audit-message"), "epoch": 1, "correlation": "c0rr\"'><b>",
               "prev_hash": "0" * 64, "hash": "f" * 64, "alg": "hmac-sha256"}  # fmt: skip
        pool.event("S003", "audit", row["reason"], audit=row)


def plant_odd_files(lease_dir: Path) -> None:
    """What anyone who can write the share (no key) plants: names the panel shows in its banner."""
    (lease_dir / "members").mkdir(parents=True, exist_ok=True)
    (lease_dir / "events").mkdir(parents=True, exist_ok=True)
    (lease_dir / "members" / (short_payload("member-file") + ".json")).write_text("{}")
    with open(lease_dir / "events" / "S001.jsonl", "a") as fh:  # unsigned: refused, shown
        fh.write(json.dumps({"node": "S001", "seq": 10**6, "kind": "drain_requested",
                             "reason": long_payload("forged-reason"), "sig": "0" * 64}) + "\n")  # fmt: skip


def api(context, base: str, token: str, path: str, doc: dict) -> dict:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    r = context.request.post(base + path, data=json.dumps(doc), headers=headers)
    return {"status": r.status, **r.json()}


def login(browser, base: str, user: str, bypass_csp: bool):  # type: ignore[no-untyped-def]
    context = browser.new_context(
        bypass_csp=bypass_csp, viewport={"width": 1280, "height": 900}, ignore_https_errors=True
    )
    context.add_init_script(INIT)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.console_errors = []  # type: ignore[attr-defined]
    page.on("console", lambda m: page.console_errors.append(m.text) if m.type == "error" else None)  # type: ignore[attr-defined]
    page.goto(base + "/login/")
    page.fill("#id_username", user)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    return page


def fail_logins(browser, base: str, username: str, times: int) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    for _ in range(times):
        page.goto(base + "/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", "not-the-password")
        page.click("button[type=submit]")
        page.wait_for_load_state()
    context.close()


class Station:
    """A relay client registered with the site token under a hostile station name."""

    def __init__(self, site: Site, station: str) -> None:
        from relay.client.discovery import Discovery
        from relay.client.relay_client import RelayClient
        from relay.lease_file import lease_file

        discovery = Discovery.build(kmsn=KMSN, lease=lease_file(str(site.lease_dir), TOKEN, KMSN))
        self.client = RelayClient(role="agent", kmsn=KMSN, station=station, token=TOKEN, discovery=discovery,
                                  keepalive=1.0)  # fmt: skip
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.client.start(timeout=20), self.loop).result(30)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.client.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def check_page(page, url: str) -> str:  # type: ignore[no-untyped-def]
    """Load `url`, let one live poll come back, and return the page's text;
    fail on a canary fired or a CSP violation."""
    polled = []
    page.on("response", lambda r: polled.append(r.status) if "_poll=1" in r.url else None)
    page.goto(url)
    page.wait_for_load_state("load")
    if page.locator("#poller").count():
        for _ in range(12):  # Playwright dispatches events only while it is called
            if polled:
                break
            page.wait_for_timeout(500)
        assert polled, f"{url}: no live poll answered"
    page.wait_for_timeout(300)
    assert page.evaluate("window.__xss") is None, f"{url}: a payload ran (window.__xss set)"
    assert page.evaluate("window.__csp") == [], f"{url}: CSP violations {page.evaluate('window.__csp')}"
    csp_errors = [e for e in page.console_errors if "Content Security Policy" in e]
    assert csp_errors == [], f"{url}: {csp_errors}"
    parsed = page.evaluate(
        """() => document.querySelectorAll('img[src="x"], script:not([src]), [onerror], [onload], '
                                           + 'a[href^="javascript"], iframe').length"""
    )
    assert parsed == 0, f"{url}: payload markup parsed as HTML"
    return page.inner_text("body")


@pytest.mark.long
def test_stored_xss_through_every_outside_field_never_runs_and_shows_as_text(browser, site):  # type: ignore[no-untyped-def]
    leader = site.by_name(site.lease().node)
    follower = next(a for a in site.agents if a is not leader)
    base = leader.web_url
    hostile_user = long_payload("user")[:150]
    token = stkuser(leader.ini, "token", hostile_user).strip().splitlines()[-1]

    # The API, with the hostile user's token: reasons, a target no member has.
    ctx = browser.new_context(ignore_https_errors=True)
    epoch = site.lease().epoch
    site_api, hostile_api = f"/api/v1/sites/{KMSN}", f"/api/v1/sites/{HOSTILE}"
    member = {"target": follower.name, "expected_epoch": epoch}
    calls = {
        "drain": (f"{site_api}/drain", {**member, "reason": long_payload("drain-reason")}),
        "undrain": (f"{site_api}/undrain", {**member, "reason": long_payload("undrain-reason")}),
        "unknown": (f"{site_api}/drain", {"target": short_payload("api-target"), "reason": "x"}),
        "pause": (f"{site_api}/pause", {"expected_epoch": epoch, "reason": long_payload("pause-reason")}),
        "resume": (f"{site_api}/resume", {"expected_epoch": epoch, "reason": long_payload("resume-reason")}),
        "promote": (f"{hostile_api}/promote", {"target": "S003", "reason": long_payload("promote-reason")}),
    }
    sent = {name: api(ctx, base, token, path, doc) for name, (path, doc) in calls.items()}
    ctx.close()
    assert sent["unknown"]["status"] == 404, sent
    assert all(sent[k]["status"] == 202 for k in ("drain", "undrain", "pause", "resume")), sent
    # No member of the hostile pool is healthy (its health text is a payload): refused, and audited.
    assert sent["promote"]["status"] == 422, sent

    # The login form: failed logins under a hostile name land on the lockouts page.
    fail_logins(browser, base, long_payload("login-user")[:150], 5)

    # A relay registration with the site token under a hostile station name.
    station = Station(site, short_payload("station"))
    try:
        relay_json = leader.data_dir / "relay.json"
        what = "the station in the leader's relay.json (did the leader change?)"
        wait_until(lambda: "station:" in relay_json.read_text(), 20, what)
        pages = {
            "sites": "/",
            "site": f"/sites/{KMSN}/",
            "hostile": f"/sites/{HOSTILE}/",
            "odd": "/sites/" + urllib.parse.quote(ODD_KMSN, safe="") + "/",
            "confirm": f"/sites/{HOSTILE}/drain/?target=S001",
            "progress": f"/sites/{KMSN}/progress/{sent['drain']['correlation']}/",
            "history": "/history/?period=all",
            "audit": "/audit/",
            "lockouts": "/lockouts/",
        }
        for bypass in (False, True):
            page = login(browser, base, "olga", bypass_csp=bypass)
            texts = {name: check_page(page, base + path) for name, path in pages.items()}
            page.context.close()
    finally:
        station.close()

    shown = {
        "site": ["station", "member-file"],  # a forged line's reason is not shown, only its cause
        "hostile": ["lease-node", "lease-ip", "health", "version", "member-ip", "member-file"],
        "sites": ["lease-node"],
        "history": ["event-actor"],
        "audit": ["user", "drain-reason", "undrain-reason", "pause-reason", "resume-reason", "promote-reason",
                  "api-target", "audit-user", "audit-client", "audit-reason", "audit-message"],
        "lockouts": ["login-user"],
    }  # fmt: skip
    quoted = {"member-file"}  # quoted from a refused record: in the safe alphabet only
    missing = []
    for name, tags in shown.items():
        for tag in tags:
            payloads = [long_payload(tag), short_payload(tag)]
            if tag in quoted:
                payloads = [printable(p, DETAIL_CHARS) for p in payloads]
            if not any(p[:60] in texts[name] for p in payloads):
                missing.append(f"{name}: {tag}")
    assert missing == [], f"payloads not shown as text: {missing}"
    assert ODD_KMSN in texts["odd"] and ODD_KMSN in texts["sites"]
    assert "<b>drain</b>" in texts["audit"] and "<i>ok</i>" in texts["audit"]  # a published row

    # The API's answers are JSON, never sniffed as HTML, even opened in a tab.
    page = login(browser, base, "olga", bypass_csp=False)
    for path in ("/api/v1/audit", "/api/v1/history", f"/api/v1/sites/{HOSTILE}"):
        answer = page.goto(base + path)
        assert answer.headers["content-type"].startswith("application/json"), (path, answer.headers)
        assert answer.headers.get("x-content-type-options") == "nosniff", (path, answer.headers)
        assert page.evaluate("window.__xss") is None and page.evaluate("window.__csp") == [], path
    # The CSV export: no cell a spreadsheet would run.
    body = page.request.get(base + "/history.csv?period=all").text()
    page.context.close()
    cells = [c for row in csv.reader(io.StringIO(body)) for c in row]
    assert any("calc" in c for c in cells), "the hostile reason is not in the export"
    assert [c for c in cells if c[:1] in ("=", "+", "-", "@")] == []

    # Commands given to the hostile pool (its epoch is its members' to choose)
    # left this pool's leader and epoch alone.
    assert (site.lease().node, site.lease().epoch) == (leader.name, epoch)
