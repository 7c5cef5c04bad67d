"""The JSON API under /api/v1/: authentication (session + CSRF, bearer
tokens), read endpoints, commands with the panel's checks and audit, and the
clients' leader lookup."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import test_panel_support
from test_panel_support import (
    KMSN,
    TOKEN,
    client_for,
    event,
    make_user,
    member,
    write_pool,
)

API = "/api/v1"

dj = test_panel_support.dj  # the fixture, under its name here


def token_for(name: str, role: str = "operator") -> str:
    from elections.audit import ApiToken

    return ApiToken.issue(make_user(name, role))[1]


def bearer(key: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def post_json(c, url: str, doc: dict, **kw):  # type: ignore[no-untyped-def]
    return c.post(url, json.dumps(doc), content_type="application/json", **kw)


@pytest.mark.parametrize(
    "url",
    ["/sites", f"/sites/{KMSN}", f"/sites/{KMSN}/members", f"/sites/{KMSN}/lease", "/history", "/audit"],
)
def test_every_endpoint_needs_authentication(dj, url):
    response = client_for().get(API + url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert json.loads(response.content)["error"] == "unauthenticated"


def test_a_bad_token_is_401_not_anonymous(dj):
    response = client_for().get(f"{API}/sites", **bearer("stk_nope"))
    assert response.status_code == 401 and json.loads(response.content)["error"] == "bad_token"
    assert client_for().get(f"{API}/sites", HTTP_AUTHORIZATION="Basic eDp5").status_code == 401


def test_a_disabled_users_token_stops_working(dj):
    from django.contrib.auth import get_user_model

    key = token_for("bot", "viewer")
    assert client_for().get(f"{API}/sites", **bearer(key)).status_code == 200
    get_user_model().objects.filter(username="bot").update(is_active=False)
    assert client_for().get(f"{API}/sites", **bearer(key)).status_code == 401


def test_sites_and_site_describe_the_pool(dj):
    from django.utils import timezone

    write_pool(
        dj["data_dir"],
        leader="S002",
        epoch=5,
        members={"S001": member(), "S002": member(), "S003": member(eligible=False, reasons=["drained"])},
    )
    event("S002", 1, "elected", 5, timezone.now() - timedelta(minutes=3), "no leader seen")
    c = client_for(make_user("vera"))
    (s,) = json.loads(c.get(f"{API}/sites").content)["sites"]
    assert (s["kmsn"], s["leader"], s["epoch"], s["has_leader"]) == (KMSN, "S002", 5, True)
    assert (s["members_eligible"], s["members_total"], s["leader_changes_24h"]) == (2, 3, 1)
    assert s["since"].endswith("Z") and s["lease_status"] == "valid"
    assert 0 < s["lease_expires_in_s"] <= 3
    site = json.loads(c.get(f"{API}/sites/{KMSN}").content)
    assert [m["node"] for m in site["members"]] == ["S001", "S002", "S003"]
    assert site["members"][2]["reasons"] == ["drained"] and site["members"][1]["role"] == "leader"
    assert site["lease"]["record"]["node"] == "S002"
    members = json.loads(c.get(f"{API}/sites/{KMSN}/members").content)
    assert members["epoch"] == 5 and len(members["members"]) == 3
    lease = json.loads(c.get(f"{API}/sites/{KMSN}/lease").content)
    assert lease["status"] == "valid" and lease["record"]["epoch"] == 5
    assert c.get(f"{API}/sites/1111-2222-33-44").status_code == 404


def test_a_token_can_drain_and_the_action_is_audited_like_the_panels(dj):
    from elections.audit import AuditEntry
    from elections.ports.events.eventlog import read_events

    write_pool(dj["data_dir"], leader="S001", epoch=7)
    key = token_for("bot")
    response = post_json(
        client_for(),
        f"{API}/sites/{KMSN}/drain",
        {"target": "S002", "expected_epoch": 7, "reason": "patching"},
        **bearer(key),
    )
    assert response.status_code == 202
    doc = json.loads(response.content)
    assert doc["result"] == "accepted" and doc["epoch"] == 7 and doc["audit_recorded"]
    intent, outcome = AuditEntry.objects.order_by("seq")
    assert (intent.user, intent.via, outcome.result) == ("bot", "api", "accepted")
    assert intent.correlation == doc["correlation"]
    lines = read_events(dj["lease_dir"] / "events" / "S001.jsonl")
    assert [e["kind"] for e in lines] == ["audit", "drain_requested", "audit"]  # intent, command, outcome
    ev = lines[1]
    assert (ev["kind"], ev["target"], ev["actor"], ev["reason"]) == (
        "drain_requested",
        "S002",
        "bot",
        "patching",
    )
    # Both audit rows are published to the pool with their place in the chain.
    published = [e["audit"] for e in (lines[0], lines[2])]
    assert [(a["seq"], a["phase"], a["prev_hash"], a["hash"]) for a in published] == [
        (r.seq, r.phase, r.prev_hash, r.hash) for r in (intent, outcome)
    ]
    assert published[1]["correlation"] == doc["correlation"] and published[1]["result"] == "accepted"


@pytest.mark.parametrize(
    ("pool", "kind", "doc", "status", "result"),
    [
        (
            {"leader": "S002", "epoch": 8},
            "drain",
            {"target": "S002", "expected_epoch": 7},
            409,
            "stale_epoch",
        ),
        ({}, "drain", {"target": "S009", "expected_epoch": 7}, 404, "unknown_member"),
        ({"members": {"S001": member()}}, "drain", {"target": "S001"}, 422, "refused"),
        ({"members": {"S001": member()}}, "drain", {"target": "S001", "force": True}, 202, "accepted"),
        ({}, "promote", {"target": "S001"}, 422, "refused"),
        ({}, "promote", {"target": "S003", "expected_epoch": 7}, 202, "accepted"),
        ({}, "pause", {}, 202, "accepted"),
    ],
)
def test_command_outcomes_map_to_http_statuses(dj, pool, kind, doc, status, result):
    write_pool(dj["data_dir"], **pool)
    response = post_json(client_for(), f"{API}/sites/{KMSN}/{kind}", doc, **bearer(token_for("bot")))
    assert (response.status_code, json.loads(response.content)["result"]) == (status, result)


def test_a_viewer_token_is_forbidden_to_drain(dj):
    from elections.audit import AuditEntry

    write_pool(dj["data_dir"])
    response = post_json(
        client_for(),
        f"{API}/sites/{KMSN}/drain",
        {"target": "S002"},
        **bearer(token_for("watcher", "viewer")),
    )
    assert response.status_code == 403 and json.loads(response.content)["result"] == "forbidden"
    assert AuditEntry.objects.get(phase="outcome").result == "forbidden"


def test_bad_command_bodies_are_400(dj):
    write_pool(dj["data_dir"])
    c, auth = client_for(), bearer(token_for("bot"))
    url = f"{API}/sites/{KMSN}/drain"
    assert c.post(url, "{nope", content_type="application/json", **auth).status_code == 400
    assert post_json(c, url, {"target": "S002", "expected_epoch": "seven"}, **auth).status_code == 400
    assert post_json(c, url, {"target": ["S002"]}, **auth).status_code == 400
    assert post_json(c, f"{API}/sites/{KMSN}/explode", {}, **auth).status_code == 404
    assert c.get(url, **auth).status_code == 405


def test_an_epoch_no_epoch_can_be_is_400_not_an_unwritable_audit_row(dj):
    # Found by schemathesis (tests/test_openapi.py): 2^100 reached the audit trail's INTEGER column (503).
    write_pool(dj["data_dir"])
    c, auth = client_for(), bearer(token_for("bot"))
    url = f"{API}/sites/{KMSN}/drain"
    for epoch in (1 << 100, -1, 1 << 63):
        response = post_json(c, url, {"target": "S002", "expected_epoch": epoch}, **auth)
        assert response.status_code == 400 and json.loads(response.content)["error"] == "bad_request"
    assert post_json(c, url, {"target": "S002", "expected_epoch": (1 << 63) - 1}, **auth).status_code == 409


def test_any_other_api_path_is_a_json_404_after_authentication(dj):
    c, auth = client_for(), bearer(token_for("bot"))
    assert c.get(f"{API}/nope").status_code == 401
    for url in (f"{API}/nope", f"{API}/sites/a/b/members", f"{API}/sites/{KMSN}/lease/x"):
        response = c.get(url, **auth)
        assert response.status_code == 404 and json.loads(response.content)["error"] == "not_found"


def test_a_session_post_needs_the_csrf_header_a_token_post_does_not(dj):
    write_pool(dj["data_dir"])
    c = client_for(make_user("olga", "operator"), csrf=True)
    url = f"{API}/sites/{KMSN}/drain"
    refused = post_json(c, url, {"target": "S002", "expected_epoch": 7})
    assert refused.status_code == 403 and json.loads(refused.content)["error"] == "csrf"
    c.get("/")  # sets the CSRF cookie
    csrf = c.cookies["stk_csrf"].value
    assert (
        post_json(c, url, {"target": "S002", "expected_epoch": 7}, HTTP_X_CSRFTOKEN=csrf).status_code == 202
    )
    tokened = client_for(csrf=True)
    assert post_json(tokened, url, {"target": "S003"}, **bearer(token_for("bot"))).status_code == 202


def test_history_is_paginated_and_filtered(dj):
    from django.utils import timezone

    now = timezone.now()
    event("S001", 1, "elected", 1, now - timedelta(hours=50), "no lease file and no leader ever seen")
    for epoch in range(2, 8):
        node = f"S00{epoch % 3 + 1}"
        event(
            node,
            epoch,
            "elected",
            epoch,
            now - timedelta(hours=8 - epoch),
            f"lease of X expired: not renewed for {epoch}.5 s ≥ 3 s",
            cause="expired",
            gap_s=epoch + 0.5,
        )
    c = client_for(make_user("vera"))
    doc = json.loads(c.get(f"{API}/history", {"period": "all", "page_size": 4}).content)
    assert (doc["count"], doc["pages"], len(doc["failovers"])) == (7, 2, 4)
    assert doc["failovers"][0]["epoch"] == 7 and doc["failovers"][0]["gap_s"] == 7.5
    page2 = json.loads(c.get(f"{API}/history", {"period": "all", "page_size": 4, "page": 2}).content)
    assert [f["epoch"] for f in page2["failovers"]] == [3, 2, 1]
    recent = json.loads(c.get(f"{API}/history", {"period": "24h"}).content)
    assert recent["count"] == 6
    first = json.loads(c.get(f"{API}/history", {"period": "all", "reason": "first election"}).content)
    assert [f["epoch"] for f in first["failovers"]] == [1]
    assert c.get(f"{API}/history", {"page": 99}).status_code == 404


def test_audit_lists_actions_with_their_outcome_and_the_chain_state(dj):
    write_pool(dj["data_dir"])
    c, auth = client_for(), bearer(token_for("bot"))
    post_json(c, f"{API}/sites/{KMSN}/drain", {"target": "S002", "expected_epoch": 6}, **auth)
    post_json(c, f"{API}/sites/{KMSN}/drain", {"target": "S002", "expected_epoch": 7}, **auth)
    doc = json.loads(c.get(f"{API}/audit", **auth).content)
    assert doc["chain"] == {"ok": True, "entries": 4, "broken_at": None, "detail": None}
    assert [(a["result"], a["expected_epoch"]) for a in doc["actions"]] == [
        ("accepted", 7),
        ("stale_epoch", 6),
    ]
    only = json.loads(c.get(f"{API}/audit", {"result": "stale_epoch"}, **auth).content)
    assert [a["expected_epoch"] for a in only["actions"]] == [6]


def _write_lease(lease_dir, node: str = "S002", epoch: int = 4) -> None:  # type: ignore[no-untyped-def]
    from elections.core.lease import LeaseRecord

    rec = LeaseRecord(
        kmsn=KMSN,
        station=node,
        ip="127.0.0.22",
        port=9530,
        pid=1,
        epoch=epoch,
        lease_until="20990101000000",
        node=node,
        renew_seq=1,
        ttl_s=3,
        handoff_to=None,
    )
    (lease_dir / "relay_leader.json").write_bytes(rec.encode(TOKEN))


def test_the_leader_lookup_needs_auth_unless_made_public(dj):
    from django.test import override_settings

    _write_lease(dj["lease_dir"])
    url = f"{API}/leader?kmsn={KMSN}"
    assert client_for().get(url).status_code == 401
    doc = json.loads(client_for(make_user("vera")).get(url).content)
    assert (doc["leader"], doc["epoch"], doc["ip"], doc["port"], doc["status"]) == (
        "S002",
        4,
        "127.0.0.22",
        9530,
        "valid",
    )
    with override_settings(STK_PUBLIC_LEADER_LOOKUP=True):
        assert json.loads(client_for().get(url).content)["leader"] == "S002"
        other = client_for().get(f"{API}/leader?kmsn=1111-2222-33-44")
        assert other.status_code == 404 and json.loads(other.content)["status"] == "unknown_kmsn"
        assert client_for().get(f"{API}/sites").status_code == 401  # only the lookup is public


def test_the_client_address_comes_from_forwarded_for_only_when_configured(dj):
    from django.test import override_settings

    from elections.audit import AuditEntry

    write_pool(dj["data_dir"])
    key = token_for("bot")
    hdr = {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9, 198.51.100.2"}
    post_json(client_for(), f"{API}/sites/{KMSN}/pause", {}, **bearer(key), **hdr)
    with override_settings(STK_TRUSTED_PROXIES=["10.0.0.1/32"]):  # WEB_TRUSTED_PROXIES
        post_json(client_for(), f"{API}/sites/{KMSN}/resume", {}, **bearer(key), **hdr)
    clients = list(AuditEntry.objects.filter(phase="intent").order_by("seq").values_list("client", flat=True))
    assert clients == ["10.0.0.1", "198.51.100.2 (via 10.0.0.1)"]


def test_an_expected_epoch_the_database_cannot_hold_is_refused_and_audited_from_any_entry(dj):
    from elections import audit
    from elections.steering import Actor, perform

    write_pool(dj["data_dir"])
    out = perform(Actor.from_shell(), "drain", KMSN, "S002", expected_epoch=1 << 70)
    assert (out.code, out.recorded) == ("refused", True) and "not between 0 and" in out.message
    rows = list(audit.AuditEntry.objects.order_by("seq").values_list("phase", "expected_epoch", "result"))
    assert rows == [("intent", None, ""), ("outcome", None, "refused")]
