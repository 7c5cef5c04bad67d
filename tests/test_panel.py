"""The admin panel's pages with Django's test client: login, throttling, live
sections, sites and site pages, commands with their confirmation, progress,
permissions and CSRF. Pool views are written as the agent's worker writes them."""

from __future__ import annotations

import json
import os
import re
import time
from datetime import timedelta

import pytest
import test_panel_support
from test_panel_support import (
    KMSN,
    PASSWORD,
    client_for,
    event,
    make_user,
    member,
    write_leading,
    write_pool,
)

SITE = f"/sites/{KMSN}/"
HX = {"HTTP_HX_REQUEST": "true"}

dj = test_panel_support.dj  # the fixture, under its name here


def text(response) -> str:  # type: ignore[no-untyped-def]
    return re.sub(r"\s+", " ", response.content.decode())


# -- login -----------------------------------------------------------------------------
def test_it_sends_anonymous_visitors_to_the_login_page(dj):
    for url in ("/", SITE, "/history/", "/audit/", "/history.csv", f"{SITE}drain/?target=S001"):
        response = client_for().get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/?next=")


def test_an_expired_session_during_polling_redirects_htmx_to_login(dj):
    response = client_for().get("/?_poll=1", HTTP_HX_CURRENT_URL=f"http://testserver{SITE}?window=1h", **HX)
    assert response.status_code == 401
    assert response["HX-Redirect"] == "/login/?next=%2Fsites%2F9999-9999-99-99%2F%3Fwindow%3D1h"
    assert "<table" not in response.content.decode()


def test_logging_in_leads_to_the_page_asked_for(dj):
    make_user("olga", "operator")
    c = client_for()
    response = c.post("/login/", {"username": "olga", "password": PASSWORD, "next": SITE})
    assert response.status_code == 302 and response["Location"] == SITE
    assert c.get(SITE).status_code == 200


def test_login_never_redirects_off_site(dj):
    make_user("olga", "operator")
    response = client_for().post(
        "/login/", {"username": "olga", "password": PASSWORD, "next": "https://evil.example/"}
    )
    assert response["Location"] == "/"


def test_five_failures_throttle_the_user_from_that_address_even_with_the_right_password(dj):
    make_user("olga", "operator")
    c = client_for(REMOTE_ADDR="192.0.2.7")
    for _ in range(5):
        assert c.post("/login/", {"username": "olga", "password": "wrong-password"}).status_code == 200
    blocked = c.post("/login/", {"username": "olga", "password": PASSWORD})
    assert blocked.status_code == 429
    assert int(blocked["Retry-After"]) > 0
    assert "Too many failed attempts" in text(blocked)
    # Another address is not throttled for the same user.
    other = client_for(REMOTE_ADDR="192.0.2.8")
    assert other.post("/login/", {"username": "olga", "password": PASSWORD}).status_code == 302


def test_the_login_page_has_secure_headers_and_cookies(dj):
    from django.conf import settings

    response = client_for().get("/login/")
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert "unsafe-eval" not in response["Content-Security-Policy"]
    assert response["X-Frame-Options"] == "DENY"
    assert settings.SESSION_COOKIE_HTTPONLY and settings.CSRF_COOKIE_HTTPONLY
    assert settings.PASSWORD_HASHERS[0].endswith("Argon2PasswordHasher")


def test_logout_is_a_post(dj):
    c = client_for(make_user("vera"))
    assert c.get("/logout/").status_code == 405
    assert c.post("/logout/").status_code == 302
    assert c.get("/").status_code == 302


# -- sites page --------------------------------------------------------------------------
def test_the_sites_page_shows_leader_epoch_since_lease_and_members(dj):
    from django.utils import timezone

    write_pool(
        dj["data_dir"],
        leader="S002",
        epoch=7,
        members={"S001": member(), "S002": member(), "S003": member(eligible=False, reasons=["drained"])},
    )
    event("S002", 1, "elected", 7, timezone.now() - timedelta(minutes=5), "no leader seen")
    event("S001", 1, "elected", 6, timezone.now() - timedelta(hours=30), "no leader seen")
    page = text(client_for(make_user("vera")).get("/"))
    assert KMSN in page
    assert '<strong class="leader">S002</strong>' in page
    assert 'data-label="Epoch">7</td>' in page
    assert "UTC</time>" in page  # leader since, from the elected event of epoch 7
    assert re.search(r"renewed \d+\.\d s ago · expires in \d+\.\d s", page)
    assert 'data-label="Eligible members">2 / 3</td>' in page
    assert 'data-label="Leader changes, 24 h">1</td>' in page  # one leader change in 24 h
    assert "shown on the leader's panel" in page  # this agent (S001) does not lead
    assert "<title>⚠" not in page and 'data-alarm="1"' not in page


def test_a_pool_without_a_leader_turns_the_row_the_title_and_the_favicon_red(dj):
    write_pool(dj["data_dir"], leader=None, status="missing")
    page = text(client_for(make_user("vera")).get("/"))
    assert "<title>⚠ NO LEADER · Sites" in page
    assert 'href="/static/favicon-alarm.svg"' in page
    assert re.search(r"<tr class=\"bad\" data-kmsn=", page)
    assert 'data-alarm="1"' in page
    assert "no valid lease (status missing)" in page


def test_an_expired_or_released_lease_is_no_leader(dj):
    write_pool(dj["data_dir"], leader="S001", released=True)
    assert "lease released by S001" in text(client_for(make_user("vera")).get("/"))
    write_pool(dj["data_dir"], leader="S001", renew_seq=99, updated=time.monotonic() - 4)
    page = text(client_for(make_user("vera2")).get("/"))
    assert "NO LEADER" in page


def test_a_released_lease_is_shown_as_released_and_handing_off_never_as_valid(dj):
    # Issue 42: a lease handed to a dead member was shown "valid" for a whole TTL.
    doc = write_pool(dj["data_dir"], leader="S001", released=True)
    doc["lease"]["handoff_to"] = "S003"
    (dj["data_dir"] / "pool.json").write_text(json.dumps(doc))
    page = text(client_for(make_user("vera")).get("/"))
    assert 'data-status="released"' in page and 'data-status="valid"' not in page
    assert "released, handing off to S003" in page
    response = client_for(make_user("vera2")).get("/api/v1/sites")
    assert json.loads(response.content)["sites"][0]["lease_status"] == "released"


def test_a_pool_view_the_worker_stopped_writing_counts_as_no_leader(dj):
    write_pool(dj["data_dir"], updated=time.monotonic() - 60)
    page = text(client_for(make_user("vera")).get("/"))
    assert re.search(r"view of the pool is 6[0-5] s old", page)  # 60 s, and the time to render it
    assert "NO LEADER" in page


def test_no_pool_view_yet_is_shown_not_crashed(dj):
    page = text(client_for(make_user("vera")).get("/"))
    assert "this agent has no view of the pool yet" in page


def test_relay_clients_come_from_relay_json_when_this_agent_leads(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    snapshot = {
        "counts": {KMSN: {"S002": {"agent": 1}, "C01": {"commander": 2}}},
        "relayed": {"messages": 40, "deliveries": 80, "bytes": 4096, "no_route": 1},
        "drops": {"slow_viewer": 2},
        "connections": 3,
        "unregistered": 0,
    }
    doc = {"pid": 4242, "epoch": 7, "listening": True, "updated": time.monotonic(), "snapshot": snapshot}
    (dj["data_dir"] / "relay.json").write_text(json.dumps(doc))
    c = client_for(make_user("vera"))
    assert 'data-label="Relay clients">3</td>' in text(c.get("/"))
    page = text(c.get(SITE))
    assert "3 clients" in page
    assert '<th scope="row">C01</th><td>commander: 2</td>' in page
    assert "Drops</dt><dd>2 (slow_viewer: 2)" in page


@pytest.mark.parametrize("garbage", ["", "{not json", "[]", '{"listening": true, "snapshot": 7}'])
def test_a_damaged_relay_json_is_shown_as_such_never_a_500(dj, garbage):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    (dj["data_dir"] / "relay.json").write_text(garbage)
    c = client_for(make_user("vera"))
    assert c.get("/").status_code == 200
    page = text(c.get(SITE))
    assert "This agent leads, but its relay is not serving" in page


# -- live sections -------------------------------------------------------------------------
def _versions(page: str) -> str:
    return ",".join(f"{i}:{v}" for i, v in re.findall(r'<div id="([a-z-]+)" data-v="([0-9a-f]+)"', page))


def test_polling_answers_204_when_nothing_changed_and_only_changed_sections_otherwise(dj):
    from django.utils import timezone

    doc = write_pool(dj["data_dir"], leader="S001", updated=time.monotonic())
    event("S001", 1, "elected", 7, timezone.now() - timedelta(hours=2), "no leader seen")
    c = client_for(make_user("vera"))
    page = c.get("/history/?period=all").content.decode()
    v = _versions(page)
    assert v.startswith("history-live:")
    assert c.get("/history/", {"period": "all", "_poll": "1", "_v": v}, **HX).status_code == 204
    event("S002", 1, "elected", 8, timezone.now() - timedelta(minutes=1), "no leader seen")
    changed = c.get("/history/", {"period": "all", "_poll": "1", "_v": v}, **HX)
    assert changed.status_code == 200
    body = changed.content.decode()
    assert body.startswith('<div id="history-live" data-v="') and 'hx-swap-oob="true"' in body
    assert "<html" not in body
    # The site page: a change of members re-sends the members section, not the timeline.
    site_page = c.get(SITE).content.decode()
    v = _versions(site_page)
    doc["members"]["S003"]["eligible"] = False
    doc["members"]["S003"]["reasons"] = ["health: disk full"]
    (dj["data_dir"] / "pool.json").write_text(json.dumps(doc))
    body = c.get(SITE, {"_poll": "1", "_v": v}, **HX).content.decode()
    assert 'id="site-members"' in body and "health: disk full" in body
    assert 'id="site-timeline"' not in body


def test_every_live_page_carries_the_poller_and_no_inline_script(dj):
    c = client_for(make_user("vera"))
    write_pool(dj["data_dir"])
    for url in ("/", SITE, "/history/", "/audit/"):
        page = c.get(url).content.decode()
        assert 'id="poller"' in page and 'hx-trigger="every 2s' in page, url
        assert re.search(r"<script(?![^>]*\bsrc=)", page) is None, url


def test_static_files_are_served_by_the_app(dj):
    c = client_for()
    response = c.get("/static/vendor/htmx.min.js")
    assert response.status_code == 200
    assert b"htmx" in b"".join(response.streaming_content)
    assert c.get("/static/panel.js").status_code == 200


# -- site page ----------------------------------------------------------------------------
def test_the_site_page_shows_why_a_member_is_not_eligible_and_by_how_much(dj):
    write_pool(
        dj["data_dir"],
        members={
            "S001": member(),
            "S002": member(eligible=False, reasons=["heartbeat 17.2 s old > 10 + 5"], age=17.2),
            "S003": member(eligible=False, reasons=["drained"], drain=True, priority=10),
        },
    )
    page = text(client_for(make_user("vera")).get(SITE))
    assert "<li>heartbeat 17.2 s old &gt; 10 + 5</li>" in page
    assert "<strong>drained</strong>" in page
    assert "Members of 9999-9999-99-99: 1 of 3 eligible" in page
    assert '<span class="badge ok" data-status="valid">valid</span>' in page  # lease signature status


def test_the_site_page_says_whether_the_pool_can_take_over_a_silent_leader_fast(dj):
    """The serving right (docs/design.md §15): three members or more, or the TTL path as before."""
    vera = client_for(make_user("vera"))
    serving = {"window_s": 1.5, "silence_s": 1.82, "members": 3, "fast": True}
    write_pool(dj["data_dir"], beacons={"members": {}, "serving": serving})
    said = '<span data-fast-takeover="1">fast takeover: 3 members, window 1.5 s, silence 1.82 s</span>'
    assert said in text(vera.get(SITE))
    two = {f"S00{i}": member(ip=f"127.0.0.2{i}") for i in (1, 2)}
    write_pool(dj["data_dir"], members=two, beacons={"members": {}, "serving": {**serving, "members": 2,
                                                                               "fast": False}})  # fmt: skip
    assert '<span data-fast-takeover="0">fast takeover needs 3 members</span>' in text(vera.get(SITE))
    # issue 38: two members whose leader's epoch the share's witness names
    witness = {"epoch": 7, "ready": True, "relies": False, "counts_s": None, "waits_s": 0.0}
    paired = {**serving, "members": 2, "witness": witness}
    write_pool(dj["data_dir"], members=two, beacons={"members": {}, "serving": paired})
    said = '<span data-fast-takeover="1">fast takeover: 2 members + the share\'s witness</span>'
    assert said in text(vera.get(SITE)).replace("&#x27;", "'")
    write_pool(dj["data_dir"])  # beacons off: nothing said
    assert "fast takeover" not in text(vera.get(SITE))


def test_the_site_page_draws_the_leadership_timeline_with_gaps(dj):
    from django.utils import timezone

    now = timezone.now()
    write_pool(dj["data_dir"], leader="S002", epoch=3)
    event("S001", 1, "elected", 2, now - timedelta(hours=3), "no lease file and no leader ever seen")
    event("S001", 2, "stepped_down", 2, now - timedelta(hours=2), "released (shutdown)")
    event(
        "S002", 1, "elected", 3, now - timedelta(hours=2) + timedelta(minutes=5), "released by S001 (epoch 2)"
    )
    page = client_for(make_user("vera")).get(SITE).content.decode()
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert svg.count('class="lead"') == 2
    assert svg.count('class="gap"') == 1
    assert "S001 led epoch 2" in svg and "S002 led epoch 3" in svg
    assert 'role="img"' in svg and "<desc" in svg


def test_a_viewer_sees_every_command_button_disabled_with_the_reason(dj):
    write_pool(dj["data_dir"])
    page = text(client_for(make_user("vera", "viewer")).get(SITE))
    assert 'class="button' not in page  # no enabled command link
    # 3 drains, 3 promotes, pause: no Forget, offered only for a member gone for good (issue 42)
    assert page.count("disabled aria-describedby") == 7
    assert "needs the operator role (permission drain_member)" in page
    assert "needs the operator role (permission promote_member)" in page


def test_an_operator_gets_links_except_where_the_pool_forbids(dj):
    write_pool(
        dj["data_dir"],
        members={
            "S001": member(),
            "S002": member(),
            "S003": member(eligible=False, reasons=["drained"], drain=True),
        },
    )
    page = text(client_for(make_user("olga", "operator")).get(SITE))
    assert f'href="{SITE}drain/?epoch=7&amp;target=S001"' in page
    assert f'href="{SITE}undrain/?epoch=7&amp;target=S003"' in page
    assert f'href="{SITE}promote/?epoch=7&amp;target=S002"' in page
    assert "already the leader" in page
    assert "not eligible: drained" in page


# -- commands -----------------------------------------------------------------------------
def _events(dj, kind: str) -> list[dict]:  # type: ignore[no-untyped-def]
    from elections.ports.events.eventlog import read_events

    return [e for e in read_events(dj["lease_dir"] / "events" / "S001.jsonl") if e["kind"] == kind]


def test_the_drain_confirmation_states_the_plan_and_the_expected_epoch(dj):
    write_pool(dj["data_dir"], leader="S001", epoch=7)
    page = text(client_for(make_user("olga", "operator")).get(f"{SITE}drain/?target=S001&epoch=7"))
    assert "Drain S001, the current leader" in page
    assert "takes epoch 8" in page and "relay starts on" in page and "leader_changed" in page
    assert "issued against <strong>epoch 7</strong>" in page
    assert 'name="expected_epoch" value="7"' in page


def test_the_confirmation_warns_when_the_pool_moved_since_the_page_was_drawn(dj):
    write_pool(dj["data_dir"], leader="S002", epoch=8)
    page = text(client_for(make_user("olga", "operator")).get(f"{SITE}drain/?target=S002&epoch=7"))
    assert "showed epoch 7, it is now at epoch 8" in page


def test_an_operator_drain_is_audited_submitted_and_followed(dj):
    from elections.audit import AuditEntry

    write_pool(dj["data_dir"], leader="S001", epoch=7)
    c = client_for(make_user("olga", "operator"), REMOTE_ADDR="192.0.2.50")
    response = c.post(f"{SITE}drain/", {"target": "S002", "expected_epoch": "7", "reason": "disk swap"})
    assert response.status_code == 302
    intent, outcome = AuditEntry.objects.order_by("seq")
    assert (intent.phase, intent.user, intent.client, intent.action, intent.target) == (
        "intent",
        "olga",
        "192.0.2.50",
        "drain",
        "S002",
    )
    assert (outcome.result, outcome.epoch, outcome.reason) == ("accepted", 7, "disk swap")
    assert response["Location"] == f"{SITE}progress/{intent.correlation}/"
    (drain,) = _events(dj, "drain_requested")
    assert (
        drain["target"] == "S002" and drain["actor"] == "olga" and drain["correlation"] == intent.correlation
    )
    page = text(c.get(response["Location"]))
    assert "waiting for S002 to be drained" in page
    # The pool reacts: S002's heartbeat shows the drain.
    doc = write_pool(dj["data_dir"], leader="S001", epoch=7)
    doc["members"]["S002"]["drain"] = True
    (dj["data_dir"] / "pool.json").write_text(json.dumps(doc))
    assert "S002 is drained; S001 leads epoch 7" in text(c.get(response["Location"]))


def test_draining_the_leader_is_done_when_another_member_leads_a_new_epoch(dj):
    write_pool(dj["data_dir"], leader="S001", epoch=7)
    c = client_for(make_user("olga", "operator"))
    location = c.post(f"{SITE}drain/", {"target": "S001", "expected_epoch": "7"})["Location"]
    assert "and hand off" in text(c.get(location))
    doc = write_pool(dj["data_dir"], leader="S003", epoch=8)
    doc["members"]["S001"]["drain"] = True
    (dj["data_dir"] / "pool.json").write_text(json.dumps(doc))
    page = text(c.get(location))
    assert "S001 is drained; S003 leads epoch 8 (was epoch 7)" in page
    assert 'data-done="1"' in page


def test_a_stale_epoch_is_409_with_an_explanation_and_audited(dj):
    from elections.audit import AuditEntry

    write_pool(dj["data_dir"], leader="S002", epoch=8)
    response = client_for(make_user("olga", "operator")).post(
        f"{SITE}drain/", {"target": "S002", "expected_epoch": "7"}
    )
    assert response.status_code == 409
    page = text(response)
    assert "stale_epoch" in page and "showed epoch 7" in page and "Nothing was done" in page
    assert AuditEntry.objects.get(phase="outcome").result == "stale_epoch"
    assert _events(dj, "drain_requested") == []


def test_a_viewer_cannot_drain_the_post_is_refused_and_audited(dj):
    from elections.audit import AuditEntry

    write_pool(dj["data_dir"])
    c = client_for(make_user("vera", "viewer"))
    assert c.get(f"{SITE}drain/?target=S001&epoch=7").status_code == 403
    response = c.post(f"{SITE}drain/", {"target": "S001", "expected_epoch": "7"})
    assert response.status_code == 403
    assert [(e.phase, e.result) for e in AuditEntry.objects.order_by("seq")] == [
        ("intent", ""),
        ("outcome", "forbidden"),
    ]
    assert _events(dj, "drain_requested") == []


def test_panel_posts_need_the_csrf_token(dj):
    write_pool(dj["data_dir"])
    c = client_for(make_user("olga", "operator"), csrf=True)
    response = c.post(f"{SITE}drain/", {"target": "S002", "expected_epoch": "7"})
    assert response.status_code == 403
    assert _events(dj, "drain_requested") == []


def test_promote_offers_only_eligible_members_and_needs_the_name_typed(dj):
    write_pool(
        dj["data_dir"],
        members={"S001": member(), "S002": member(), "S003": member(eligible=False, reasons=["drained"])},
    )
    c = client_for(make_user("olga", "operator"))
    page = text(c.get(f"{SITE}promote/?epoch=7"))
    assert 'value="S002"' in page and 'value="S003"' not in page and 'id="t-S001"' not in page
    wrong = c.post(f"{SITE}promote/", {"target": "S002", "expected_epoch": "7", "confirm_name": "S003"})
    assert wrong.status_code == 422 and "does not match" in text(wrong)
    assert _events(dj, "promote_requested") == []
    right = c.post(f"{SITE}promote/", {"target": "S002", "expected_epoch": "7", "confirm_name": "S002"})
    assert right.status_code == 302
    assert _events(dj, "promote_requested")[0]["target"] == "S002"


def test_promoting_an_ineligible_member_is_refused_by_the_pool_check(dj):
    write_pool(
        dj["data_dir"], members={"S001": member(), "S002": member(eligible=False, reasons=["drained"])}
    )
    response = client_for(make_user("olga", "operator")).post(
        f"{SITE}promote/", {"target": "S002", "expected_epoch": "7", "confirm_name": "S002"}
    )
    assert response.status_code == 422 and "cannot be promoted" in text(response)


def test_an_action_is_refused_when_its_intent_cannot_be_audited(dj, monkeypatch):
    from elections import audit, steering

    write_pool(dj["data_dir"])
    submitted = []
    monkeypatch.setattr(steering, "submit", lambda *a, **k: submitted.append(a))

    def broken(**fields):  # type: ignore[no-untyped-def]
        raise audit.AuditUnavailable("disk full")

    monkeypatch.setattr(audit.AuditTrail, "append", lambda self, **fields: broken(**fields))
    response = client_for(make_user("olga", "operator")).post(
        f"{SITE}drain/", {"target": "S002", "expected_epoch": "7"}
    )
    assert response.status_code == 503
    assert "could not be recorded in the audit history first" in text(response)
    assert submitted == []


def test_pause_and_resume_follow_the_recorded_state(dj):
    write_pool(dj["data_dir"])
    c = client_for(make_user("olga", "operator"))
    assert "Pause failover" in text(c.get(SITE))
    assert c.post(f"{SITE}pause/", {"expected_epoch": "7"}).status_code == 302
    page = text(c.get(SITE))
    assert 'Automatic failover: <strong class="badge warn">paused</strong>' in page
    assert "Resume failover" in page


def test_the_metrics_are_readable_from_loopback_only_or_with_a_token(dj):
    from elections.audit import ApiToken

    write_pool(dj["data_dir"], leader="S002", epoch=9)
    body = client_for(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    assert f'stkrelay_pool_leader{{kmsn="{KMSN}",node="S002"}} 1' in body
    assert f'stkrelay_pool_epoch{{kmsn="{KMSN}"}} 9' in body
    assert "# TYPE stkrelay_failovers_total counter" in body
    assert client_for(REMOTE_ADDR="192.0.2.9").get("/metrics").status_code == 401
    _, key = ApiToken.issue(make_user("prom", "viewer"))
    ok = client_for(REMOTE_ADDR="192.0.2.9").get("/metrics", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert ok.status_code == 200


def write_leadership(data_dir, age: float = 0.0, leader: bool = True) -> None:
    """DATA_DIR/leadership.json as the worker publishes it, `age` seconds ago (monotonic)."""
    from elections.ports.local.localstate import Leadership, LocalState

    now = time.monotonic()
    state = Leadership(node="S001", pid=os.getpid(), leader=leader, epoch=7 if leader else None, max_epoch=7,
                       valid_until=now + 60 if leader else None, updated=now - age,
                       decision="renew: S001 holds epoch 7; S002 stale 12.0 s")  # fmt: skip
    LocalState(data_dir).write_leadership(state)


def test_healthz_tells_a_stranger_only_up_or_down_and_the_role(dj):
    write_leadership(dj["data_dir"])
    response = client_for(REMOTE_ADDR="192.0.2.9").get("/healthz")
    assert response.status_code == 200
    assert json.loads(response.content) == {"status": "up", "role": "leader"}
    assert b"S002" not in response.content and b"epoch" not in response.content


def test_healthz_shows_the_decision_on_loopback_or_to_an_authenticated_client(dj):
    from elections.audit import ApiToken

    write_leadership(dj["data_dir"])
    _, key = ApiToken.issue(make_user("prom", "viewer"))
    for answer in (
        client_for(REMOTE_ADDR="127.0.0.1").get("/healthz"),
        client_for(REMOTE_ADDR="192.0.2.9").get("/healthz", HTTP_AUTHORIZATION=f"Bearer {key}"),
        client_for(make_user("vera", "viewer"), REMOTE_ADDR="192.0.2.9").get("/healthz"),
    ):
        doc = json.loads(answer.content)
        assert doc["status"] == "up" and doc["node"] == "S001" and doc["leader"] is True
        assert doc["decision"].startswith("renew: S001 holds epoch 7")
    bad_token = client_for(REMOTE_ADDR="192.0.2.9").get("/healthz", HTTP_AUTHORIZATION="Bearer nope")
    assert set(json.loads(bad_token.content)) == {"status", "role"}


def test_healthz_is_down_503_when_the_worker_has_not_published_lately(dj):
    write_leadership(dj["data_dir"], age=600, leader=False)
    response = client_for(REMOTE_ADDR="192.0.2.9").get("/healthz")
    assert response.status_code == 503
    assert json.loads(response.content) == {"status": "down", "role": "follower"}
    (dj["data_dir"] / "leadership.json").unlink()
    assert client_for(REMOTE_ADDR="192.0.2.9").get("/healthz").status_code == 503
