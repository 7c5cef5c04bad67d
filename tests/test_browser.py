"""The panel in a real browser, on a real 3-agent site.

Playwright for Python drives Debian's Chromium (`apt-get install chromium`;
never `playwright install`). One site and one browser serve the whole module;
users are created with `manage.py stkuser` against agent S001, whose panel
every test uses; S001 also watches two simulated pools (tests/poolsim.py), one
of them without a leader. Each page is also checked with the vendored
axe-core: no "serious" or "critical" violation; and every page fits a phone
(390 px wide) without scrolling sideways.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from harness import CHROMIUM, KMSN, PY, ROOT, Site, wait_until
from harness import CHROMIUM_ARGS as ARGS
from poolsim import SimPool, Ticker, pool_section

pytestmark = pytest.mark.agents

PASSWORD = "browser-test-passphrase"
SITE_PATH = f"/sites/{KMSN}/"
WATCHED, LEADERLESS = "1111-1111-11-11", "2222-2222-22-22"
PHONE = {"width": 390, "height": 844}

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
if CHROMIUM is None:
    pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)", allow_module_level=True)


def stkuser(ini: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STK_")}
    env["STK_INI"] = str(ini)
    out = subprocess.run(
        [PY, str(ROOT / "manage.py"), "stkuser", *args],
        input=PASSWORD + "\n",
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    s = Site(root / "site", n=3)
    watched = SimPool(root / "a" / "socket", WATCHED, "watched-key-0123456789ab", members=10)
    watched.elect("S004")
    leaderless = SimPool(root / "b" / "socket", LEADERLESS, "leaderless-key-0123456789", members=2)
    with open(s.by_name("S001").ini, "a") as fh:
        fh.write(pool_section(WATCHED, watched.dir, watched.key, NODE="OFFICE1"))
        fh.write(pool_section(LEADERLESS, leaderless.dir, leaderless.key, NODE="OFFICE1"))
    ticker = Ticker(watched)
    try:
        s.start()
        s.wait_leader(60)
        panel = s.by_name("S001")
        wait_until(lambda: (panel.data_dir / "pool.json").exists(), 30, "S001's pool view")
        stkuser(panel.ini, "add", "olga", "--role", "operator")
        stkuser(panel.ini, "add", "vera", "--role", "viewer")
        s.base = panel.web_url  # type: ignore[attr-defined]  # https://, as on a site
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


def login(browser, site, user: str, viewport: dict | None = None):  # type: ignore[no-untyped-def]
    # The agent's certificate is self-signed: Chromium is told to accept it, as an operator does once.
    size = viewport or {"width": 1280, "height": 900}
    context = browser.new_context(viewport=size, ignore_https_errors=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(site.base + SITE_PATH)
    assert "/login/" in page.url
    page.fill("#id_username", user)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(SITE_PATH) + "$"))
    return page


def no_serious_axe_violations(page) -> None:  # type: ignore[no-untyped-def]
    page.add_script_tag(url="/static/vendor/axe.min.js")
    found = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
             .filter(v => v.impact === "serious" || v.impact === "critical")
             .map(v => `${v.id} (${v.impact}): ${v.nodes.map(n => n.target.join(" ")).join(", ")}`)"""
    )
    assert found == [], f"{page.url}: {found}"


def same_origin(site) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The Origin a browser sends with a form it posts: over HTTPS Django refuses a POST
    without Origin or Referer (its strict referer check), whatever its CSRF token."""
    return {"Origin": site.base}


def leader_on(page) -> str:  # type: ignore[no-untyped-def]
    return page.locator("#site-summary strong.leader").inner_text()


@pytest.mark.long
def test_an_operator_drains_the_leader_and_sees_the_new_leader_without_reloading(browser, site):
    from elections.ports.events.eventlog import read_events

    before = site.lease()
    watcher = login(browser, site, "olga")  # a second tab that only watches
    wait_until(lambda: leader_on(watcher) == before.node, 10, "the leader on the site page")
    watcher.evaluate("window.__notReloaded = true")
    no_serious_axe_violations(watcher)

    page = watcher.context.new_page()
    page.goto(site.base + SITE_PATH)
    row = page.locator(f'tr[data-member="{before.node}"]')
    assert row.locator("strong", has_text="leader").count() == 1
    row.locator("a.button.drain").click()
    page.wait_for_url(re.compile(r"/drain/\?"))
    assert f"issued against epoch {before.epoch}" in page.inner_text("main")
    assert "takes epoch" in page.inner_text("main")
    no_serious_axe_violations(page)
    page.fill("#reason", "browser test")
    page.click("button.danger")
    page.wait_for_url(re.compile(r"/progress/[0-9a-f]+/$"))
    correlation = page.url.rstrip("/").rsplit("/", 1)[1]
    no_serious_axe_violations(page)
    # The progress page polls until the pool shows a new leader.
    page.wait_for_selector(".progress[data-done='1']", timeout=30_000)
    assert re.search(rf"{before.node} is drained; S00\d leads epoch \d+", page.inner_text("#progress-text"))
    after = site.wait_leader(5, other_than=before.node)
    assert after.epoch > before.epoch

    # The watching tab changed without a reload.
    wait_until(lambda: leader_on(watcher) == after.node, 15, "the new leader in the watching tab")
    assert watcher.evaluate("window.__notReloaded") is True
    watcher.locator(f'tr[data-member="{before.node}"]', has_text="drained").wait_for(timeout=15_000)

    # The command event and the audit row exist.
    events = read_events(site.lease_dir / "events" / "S001.jsonl")
    assert any(e["kind"] == "drain_requested" and e.get("correlation") == correlation for e in events)
    page.goto(site.base + "/audit/")
    audit_row = page.locator(f'tr[data-correlation="{correlation}"]')
    assert "olga" in audit_row.inner_text() and "accepted" in audit_row.inner_text()
    assert "browser test" in audit_row.inner_text()
    assert "Audit chain verified" in page.inner_text("#chain-status")
    no_serious_axe_violations(page)
    watcher.context.close()


def test_a_stale_epoch_gets_409_with_an_explanation(browser, site):
    page = login(browser, site, "olga")
    epoch = site.lease().epoch
    follower = next(a.name for a in site.agents if a.name != site.lease().node)
    page.goto(f"{site.base}{SITE_PATH}undrain/?target={follower}&epoch={epoch - 1}")
    assert "The pool has moved on" in page.inner_text("main")
    response = page.expect_response(lambda r: r.request.method == "POST")
    with response as info:
        page.click("button.danger")
    assert info.value.status == 409
    assert "stale_epoch" in page.inner_text("main") and "Nothing was done" in page.inner_text("main")
    no_serious_axe_violations(page)
    page.context.close()


def test_a_viewer_sees_disabled_buttons_and_a_post_is_refused(browser, site):
    page = login(browser, site, "vera")
    leader = site.lease().node
    button = page.locator(f'tr[data-member="{leader}"] button.drain')
    assert button.is_disabled()
    assert "needs the operator role" in page.locator(f'tr[data-member="{leader}"]').inner_text()
    assert page.locator("a.button").count() == 0
    token = page.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    response = page.request.post(
        f"{site.base}{SITE_PATH}drain/",
        form={"csrfmiddlewaretoken": token, "target": leader, "expected_epoch": str(site.lease().epoch)},
        headers=same_origin(site),
    )
    assert response.status == 403
    assert "needs the operator role" in response.text()
    no_serious_axe_violations(page)
    page.context.close()


def test_posts_without_the_csrf_token_are_refused(browser, site):
    page = login(browser, site, "olga")
    leader = site.lease()
    response = page.request.post(
        f"{site.base}{SITE_PATH}pause/", form={"expected_epoch": str(leader.epoch)}, headers=same_origin(site)
    )
    assert response.status == 403 and "Referer" not in response.text()  # for the token, not the origin
    api = page.request.post(
        f"{site.base}/api/v1/sites/{KMSN}/pause",
        data={"expected_epoch": leader.epoch},
        headers=same_origin(site),
    )
    assert api.status == 403 and api.json()["error"] == "csrf"
    page.context.close()


def test_history_sites_and_login_pages_are_accessible(browser, site):
    page = login(browser, site, "olga")
    for path in ("/", "/history/?period=all", f"{SITE_PATH}promote/"):
        page.goto(site.base + path)
        no_serious_axe_violations(page)
    # This test's own drain, so that it holds whether or not the (long) drain test ran before it.
    before = site.wait_leader()
    page.goto(site.base + SITE_PATH)
    token = page.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    drained = page.request.post(
        f"{site.base}{SITE_PATH}drain/",
        form={
            "csrfmiddlewaretoken": token,
            "target": before.node,
            "expected_epoch": str(before.epoch),
            "reason": "history test",
        },
        headers=same_origin(site),
    )
    assert drained.ok, drained.text()
    after = site.wait_leader(30, other_than=before.node, min_epoch=before.epoch + 1)
    rows = page.context.new_page()
    polls: list[int] = []
    rows.on("response", lambda r: polls.append(r.status) if "_poll=1" in r.url else None)
    seen = [""]

    def drain_listed() -> bool:  # the drain reaches this agent's history through the event files
        rows.goto(site.base + "/history/?period=all")
        row = rows.locator("tbody tr", has=rows.locator(f"th:text-is('{after.epoch}')"))
        seen[0] = rows.inner_text("tbody")
        return row.count() == 1 and "drained" in row.inner_text() and "olga" in row.inner_text()

    wait_until(drain_listed, 30, f"the drain of epoch {before.epoch} in the history page")
    assert rows.locator("tbody tr").count() >= 2, seen[0]  # the first election and the drain
    for _ in range(20):  # Playwright dispatches events only while it is called
        if 204 in polls:
            break
        rows.wait_for_timeout(500)
    assert 204 in polls, f"no poll answered 204 (nothing changed): {polls}"
    anonymous = browser.new_context(ignore_https_errors=True).new_page()
    anonymous.goto(site.base + "/login/")
    no_serious_axe_violations(anonymous)
    anonymous.context.close()
    page.context.close()


def test_an_expired_session_while_polling_lands_on_the_login_page(browser, site):
    page = login(browser, site, "olga")
    page.context.clear_cookies()
    page.wait_for_url(re.compile(r"/login/\?next=%2Fsites%2F"), timeout=10_000)
    assert page.locator("#id_username").is_visible()
    assert page.locator("table.members").count() == 0
    page.context.close()


def test_the_page_says_when_live_updates_stop(browser, site):
    page = login(browser, site, "olga")
    started = time.monotonic()
    page.route(re.compile(r".*_poll=1.*"), lambda route: route.abort())
    page.wait_for_selector("#live-banner:not([hidden])", timeout=20_000)
    assert "Live updates stopped" in page.inner_text("#live-banner")
    assert time.monotonic() - started >= 9
    page.unroute(re.compile(r".*_poll=1.*"))
    page.wait_for_selector("#live-banner[hidden]", state="attached", timeout=10_000)
    page.context.close()


def test_the_sites_page_shows_the_watched_pools_worst_first(browser, site):
    page = login(browser, site, "vera")
    page.goto(site.base + "/")
    rows = page.locator("table.fleet tbody tr")
    wait_until(lambda: rows.count() == 3, 20, "three pools on the sites page")
    assert rows.nth(0).get_attribute("data-kmsn") == LEADERLESS  # no leader: first
    assert "no leader" in rows.nth(0).inner_text() and "watched" in rows.nth(0).inner_text()
    watched = page.locator(f'tr[data-kmsn="{WATCHED}"]')
    wait_until(lambda: "S004" in watched.inner_text(), 20, "the watched pool's leader")
    assert page.title().startswith("\u26a0 NO LEADER")
    page.click("th a:text('KMSN')")
    page.wait_for_url(re.compile(r"sort=kmsn"))
    assert [rows.nth(i).get_attribute("data-kmsn") for i in range(3)] == sorted([KMSN, WATCHED, LEADERLESS])
    no_serious_axe_violations(page)
    page.context.close()


def test_every_page_fits_a_phone_without_scrolling_sideways(browser, site):
    page = login(browser, site, "olga", viewport=PHONE)
    follower = next(a.name for a in site.agents if a.name != site.lease().node)
    paths = ["/", SITE_PATH, f"/sites/{WATCHED}/", f"/sites/{LEADERLESS}/", "/history/?period=all", "/audit/",
             f"{SITE_PATH}promote/", f"{SITE_PATH}drain/?target={follower}", "/login/"]  # fmt: skip
    widths = {}
    for path in paths:
        page.goto(site.base + path)
        widths[path] = page.evaluate("document.documentElement.scrollWidth")
    assert all(w <= PHONE["width"] for w in widths.values()), widths
    # The audit trail is cards on a phone (issue 42): nothing to scroll sideways, even inside its box.
    page.goto(site.base + "/audit/")
    box = page.evaluate(
        """() => { const w = document.querySelector("table.audit").closest(".table-wrap");
                   const row = w.querySelector("tbody tr");
                   return [w.scrollWidth, w.clientWidth, getComputedStyle(row).display]; }"""
    )
    assert box[0] <= box[1] and box[2] == "block", box
    page.context.close()
