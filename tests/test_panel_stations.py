"""The panel and the API on station bindings (`elections.core.stations`): which key
each relay session uses, the recommendation to move off the site token, the
bound stations with their reset button, and the reset itself — permission-checked,
audited and written to the pool's event log like a drain; /metrics counts
impersonation attempts. Real Django, real files in a temporary data dir.
"""

from __future__ import annotations

import json

import test_panel_support
from test_panel_support import KMSN, client_for, make_user, write_leading, write_pool, write_relay

from elections.core.stations import BOUND, SEEN, StationBook
from elections.ports.local.localstate import LocalState

SITE = f"/sites/{KMSN}/"
dj = test_panel_support.dj


def text(response) -> str:  # type: ignore[no-untyped-def]
    return response.content.decode()


def sessions(*rows: tuple[str, str, str]) -> dict:
    clients = [{"kmsn": KMSN, "station": s, "role": r, "key": k, "peer": "192.0.2.9:5000", "session": s}
               for s, r, k in rows]  # fmt: skip
    counts: dict = {}
    for s, r, _ in rows:
        counts.setdefault(s, {})[r] = 1
    return {"counts": {KMSN: counts}, "clients": clients, "connections": len(rows), "unregistered": 0}


def bind_and_see(data_dir, bound=("S002",), seen=("C01",)) -> None:
    book = StationBook()
    book.apply([{"kind": BOUND, "station": s, "node": "S001", "seq": i + 1, "clock": i + 1}
                for i, s in enumerate(bound)])  # fmt: skip
    book.apply([{"kind": SEEN, "station": s, "node": "S001", "seq": 100 + i} for i, s in enumerate(seen)])
    LocalState(data_dir).write_stations(book.to_doc())


def test_the_site_page_shows_each_sessions_key_and_recommends_credentials_for_the_token(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], sessions(("S002", "agent", "station"), ("C01", "commander", "token")))
    page = text(client_for(make_user("vera")).get(SITE))
    assert '<th scope="row">S002</th><td>agent</td><td><span class="badge ok">station credential' in page
    assert '<th scope="row">C01</th><td>commander</td><td><span class="badge warn">site token' in page
    assert 'id="recommend-credentials"' in page and "1 session authenticates with the site-wide token" in page
    assert "relayctl credential --all" in page and "RELAY_STATION_KEYS_ONLY = 1" in page


def test_no_recommendation_when_every_session_uses_its_credential(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], sessions(("S002", "agent", "station"), ("C01", "commander", "station")))
    page = text(client_for(make_user("vera")).get(SITE))
    assert 'id="relay-keys"' in page and 'id="recommend-credentials"' not in page


def test_bound_stations_have_a_reset_button_for_operators_only(dj):
    write_pool(dj["data_dir"], leader="S001", epoch=7)
    bind_and_see(dj["data_dir"])
    viewer = text(client_for(make_user("vera")).get(SITE))
    assert (
        "bound: the site token is refused for it" in viewer
        and "not bound: seen with the site token" in viewer
    )
    assert "needs the operator role" in viewer and "/unbind/?" not in viewer
    operator = text(client_for(make_user("olga", "operator")).get(SITE))
    assert f"{SITE}unbind/?epoch=7&amp;target=S002" in operator
    assert "unbind/?epoch=7&amp;target=C01" not in operator  # not bound: nothing to reset


def test_a_reset_from_the_panel_is_confirmed_audited_and_written_to_the_pool(dj):
    from elections.audit import AuditEntry
    from elections.ports.events.eventlog import read_events

    write_pool(dj["data_dir"], leader="S001", epoch=7)
    bind_and_see(dj["data_dir"])
    c = client_for(make_user("olga", "operator"), REMOTE_ADDR="192.0.2.50")
    confirm = text(c.get(f"{SITE}unbind/?target=S002&epoch=7"))
    assert "Reset the binding of station S002" in confirm and 'name="target" value="S002"' in confirm
    response = c.post(f"{SITE}unbind/", {"target": "S002", "expected_epoch": "7", "reason": "reinstalled"})
    assert response.status_code == 302
    intent, outcome = AuditEntry.objects.order_by("seq")
    assert (intent.action, intent.target, intent.user, intent.client) == (
        "unbind",
        "S002",
        "olga",
        "192.0.2.50",
    )
    assert (outcome.result, outcome.reason) == ("accepted", "reinstalled")
    (reset,) = [
        e for e in read_events(dj["lease_dir"] / "events" / "S001.jsonl") if e["kind"] == "unbind_requested"
    ]
    assert reset["target"] == "S002" and reset["actor"] == "olga" and isinstance(reset["clock"], int)
    folded = StationBook()
    folded.apply([{"kind": BOUND, "station": "S002", "node": "S001", "seq": 1, "clock": 1}, reset])
    assert not folded.is_bound("S002")  # the reset's clock is above the bind it saw


def test_a_viewer_cannot_reset_a_binding_through_the_api(dj):
    from elections.audit import AuditEntry

    write_pool(dj["data_dir"], leader="S001", epoch=7)
    c = client_for(make_user("vera"))
    response = c.post(f"/api/v1/sites/{KMSN}/unbind", json.dumps({"target": "S002"}),
                      content_type="application/json")  # fmt: skip
    assert response.status_code == 403
    assert [e.result for e in AuditEntry.objects.filter(phase="outcome")] == ["forbidden"]


def test_metrics_count_impersonation_attempts_and_the_relay_refusals(dj):
    write_pool(dj["data_dir"], leader="S001")
    doc = json.loads((dj["data_dir"] / "pool.json").read_text())
    doc["refusals"] = {"counts": {"impersonation": 3}, "recent": []}
    (dj["data_dir"] / "pool.json").write_text(json.dumps(doc))
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], {**sessions(("S002", "agent", "station")), "drops": {"bound_station": 3}})
    body = text(client_for(REMOTE_ADDR="127.0.0.1").get("/metrics"))
    assert f'stkrelay_security_events_total{{cause="impersonation",kmsn="{KMSN}"}} 3.0' in body
    assert f'stkrelay_relay_drops_total{{cause="bound_station",kmsn="{KMSN}"}} 3.0' in body


def test_an_impersonation_attempt_raises_the_security_banner_naming_the_station_and_the_address(dj):
    write_pool(dj["data_dir"], leader="S001")
    doc = json.loads((dj["data_dir"] / "pool.json").read_text())
    detail = ("the site token was refused for station S002, bound to its credential: 2 registration(s), "
              "last from 192.0.2.66:40000")  # fmt: skip
    doc["refusals"] = {
        "counts": {"impersonation": 2},
        "recent": [
            {"source": "relay:S002", "cause": "impersonation", "detail": detail, "count": 1, "last_at": "now"}
        ],
    }
    (dj["data_dir"] / "pool.json").write_text(json.dumps(doc))
    page = text(client_for(make_user("vera")).get(SITE))
    assert 'id="security-banner"' in page and "<code>relay:S002</code> — impersonation" in page
    assert "192.0.2.66:40000" in page
