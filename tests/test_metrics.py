"""GET /metrics as Prometheus scrapes it: docs/panel.md's families with their
labels, the failover-gap histogram built from the history, and
prometheus_client's process and platform metrics. (Its access rules are in
test_panel.py.)"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import test_panel_support
from test_panel_support import KMSN, client_for, event, write_leading, write_pool, write_relay

dj = test_panel_support.dj  # the fixture, under its name here


def scrape():  # type: ignore[no-untyped-def]
    """The loopback scrape, parsed as Prometheus does: {family name: family}."""
    from prometheus_client.parser import text_string_to_metric_families

    response = client_for(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert response.status_code == 200
    return response, {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def samples(families, name: str) -> dict[tuple[tuple[str, str], ...], float]:  # type: ignore[no-untyped-def]
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in families.values()
        for s in f.samples
        if s.name == name
    }


def test_the_metrics_keep_the_readmes_names_and_labels(dj):
    from django.utils import timezone
    from prometheus_client import CONTENT_TYPE_LATEST

    write_pool(dj["data_dir"], leader="S001", epoch=7)
    write_leading(dj["data_dir"], epoch=7)
    snapshot = {
        "counts": {KMSN: {"S002": {"agent": 1}, "C01": {"commander": 2}}},
        "relayed": {"messages": 40, "deliveries": 80, "bytes": 4096, "no_route": 1},
        "drops": {"slow_viewer": 2},
    }
    write_relay(dj["data_dir"], snapshot)
    event("S001", 1, "elected", 7, timezone.now(), "no lease file and no leader ever seen")
    response, families = scrape()
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    ours = {
        s.name: set(s.labels) for f in families.values() if f.name.startswith("stkrelay_") for s in f.samples
    }
    assert ours == {
        "stkrelay_pool_has_leader": {"kmsn"},
        "stkrelay_pool_leader": {"kmsn", "node"},
        "stkrelay_pool_epoch": {"kmsn"},
        "stkrelay_pool_lease_renewed_age_seconds": {"kmsn"},
        "stkrelay_pool_members": {"kmsn", "eligible"},
        "stkrelay_member_eligible": {"kmsn", "node"},
        "stkrelay_failovers_total": {"kmsn"},
        "stkrelay_failover_gap_seconds_bucket": {"kmsn", "le"},
        "stkrelay_failover_gap_seconds_count": {"kmsn"},
        "stkrelay_failover_gap_seconds_sum": {"kmsn"},
        "stkrelay_agent_leader": {"kmsn", "node"},
        "stkrelay_build_info": {"version", "python", "kmsn", "node", "store"},
        "stkrelay_pool_view_age_seconds": {"kmsn"},
        "stkrelay_pool_view_stale": {"kmsn"},
        "stkrelay_pool_view_stale_after_seconds": {"kmsn"},
        "stkrelay_pool_store_reachable": {"kmsn"},
        "stkrelay_security_events_total": {"kmsn", "cause"},
        "stkrelay_relay_clients": {"kmsn", "station", "role"},
        "stkrelay_relay_messages_total": {"kmsn"},
        "stkrelay_relay_bytes_total": {"kmsn"},
        "stkrelay_relay_drops_total": {"kmsn", "cause"},
        "stkrelay_pool_detection": {"kmsn", "mode"},
        "stkrelay_share_split": {"kmsn"},
        "stkrelay_login_lockouts": {"scope"},
        "stkrelay_login_refused_total": {"scope"},
        "stkrelay_early_takeovers_total": {"kmsn"},
        "stkrelay_webhook_events_total": {"kmsn", "outcome"},
        "stkrelay_role_change_commands_total": {"kmsn", "outcome"},
        "stkrelay_webhook_queue_depth": {"kmsn"},
        "stkrelay_webhook_oldest_pending_seconds": {"kmsn"},
    }  # and stkrelay_websocket_drops_total{route,cause} once a WebSocket was closed as too slow
    kinds = {f.name: f.type for f in families.values() if f.name.startswith("stkrelay_")}
    assert kinds["stkrelay_failovers"] == kinds["stkrelay_relay_drops"] == "counter"
    assert kinds["stkrelay_failover_gap_seconds"] == "histogram" and kinds["stkrelay_pool_epoch"] == "gauge"
    k = ("kmsn", KMSN)
    assert samples(families, "stkrelay_pool_members") == {
        (("eligible", "false"), k): 0,
        (("eligible", "true"), k): 3,
    }
    assert samples(families, "stkrelay_agent_leader") == {(k, ("node", "S001")): 1}
    (build,) = families["stkrelay_build_info"].samples
    assert build.value == 1 and build.labels["version"] not in ("", "unknown")
    assert (build.labels["kmsn"], build.labels["node"], build.labels["store"]) == (KMSN, "S001", "file")
    assert samples(families, "stkrelay_pool_view_stale") == {(k,): 0}
    assert samples(families, "stkrelay_pool_store_reachable") == {(k,): 1}
    assert samples(families, "stkrelay_failovers_total") == {(k,): 1}
    assert samples(families, "stkrelay_relay_clients")[(k, ("role", "commander"), ("station", "C01"))] == 2
    assert samples(families, "stkrelay_relay_messages_total") == {(k,): 40}
    assert samples(families, "stkrelay_relay_drops_total") == {(("cause", "slow_viewer"), k): 2}


def test_the_gap_histogram_counts_each_failovers_gap_in_its_buckets(dj):
    from django.utils import timezone

    now = timezone.now()
    event("S001", 1, "elected", 1, now - timedelta(minutes=9), "no lease file and no leader ever seen")
    for epoch, (node, gap) in enumerate((("S002", 0.3), ("S003", 1.0), ("S001", 2.5), ("S002", 45.0)), 2):
        event(
            node,
            epoch,
            "elected",
            epoch,
            now - timedelta(minutes=9 - epoch),
            "expired",
            cause="expired",
            gap_s=gap,
        )
    _, families = scrape()
    k = ("kmsn", KMSN)
    buckets = {
        float(dict(labels)["le"]): n
        for labels, n in samples(families, "stkrelay_failover_gap_seconds_bucket").items()
    }
    assert buckets == {
        0.1: 0, 0.25: 0, 0.5: 1, 1: 2, 2: 2, 3: 3, 5: 3, 10: 3, 15: 3, 30: 3, 60: 4, float("inf"): 4,
    }  # fmt: skip
    assert samples(families, "stkrelay_failover_gap_seconds_count") == {
        (k,): 4
    }  # the first election had no gap
    assert samples(families, "stkrelay_failover_gap_seconds_sum")[(k,)] == pytest.approx(48.8)
    assert samples(families, "stkrelay_failovers_total") == {(k,): 5}


def test_a_pool_without_failovers_has_an_empty_gap_histogram(dj):
    write_pool(dj["data_dir"])
    _, families = scrape()
    assert samples(families, "stkrelay_failover_gap_seconds_count") == {(("kmsn", KMSN),): 0}
    assert samples(families, "stkrelay_failovers_total") == {}


def test_the_metrics_carry_prometheus_clients_process_and_platform_metrics(dj):
    _, families = scrape()
    assert families["process_cpu_seconds"].samples[0].value > 0
    assert families["process_resident_memory_bytes"].samples[0].value > 0
    assert families["process_open_fds"].samples[0].value >= 3  # at least stdin, stdout, stderr
    assert 0 < time.time() - families["process_start_time_seconds"].samples[0].value < 3600
    (info,) = families["python_info"].samples
    assert info.labels["major"] == "3" and info.value == 1


def test_the_leaders_cloud_tunnel_is_in_the_metrics_and_on_the_panel(dj):
    from test_panel_support import make_user

    write_pool(dj["data_dir"], leader="S001", epoch=7)
    write_leading(dj["data_dir"], epoch=7)
    tunnel = {"url": "tcp://cloud.example:9542", "state": "connected", "connected": True, "epoch": 7,
              "age_s": 12.5, "remote_clients": 3, "streams": 4, "bytes_in": 1000, "bytes_out": 2000,
              "reconnects": 1, "refusals": {"stale_epoch": 1}, "last_error": ""}  # fmt: skip
    write_relay(dj["data_dir"], {"counts": {}, "relayed": {}, "drops": {}, "tunnel": tunnel})
    _, families = scrape()
    k = ("kmsn", KMSN)
    assert samples(families, "stkrelay_tunnel_connected") == {(("epoch", "7"), k): 1}
    assert samples(families, "stkrelay_tunnel_remote_clients") == {(k,): 3}
    assert samples(families, "stkrelay_tunnel_bytes_total") == {(("direction", "in"), k): 1000,
                                                                (("direction", "out"), k): 2000}  # fmt: skip
    page = client_for(make_user("tunnel-viewer")).get(f"/sites/{KMSN}/").content.decode()
    assert "Cloud tunnel to tcp://cloud.example:9542: connected, epoch 7" in page
    assert "3 remote clients" in page and "refused: stale_epoch 1" in page
    # Whatever the relay status holds, the panel and the scrape survive it.
    write_relay(
        dj["data_dir"], {"tunnel": {"epoch": "x" * 10, "refusals": [1], "age_s": True, "state": None}}
    )
    scrape()
    assert client_for(make_user("tunnel-viewer2")).get(f"/sites/{KMSN}/").status_code == 200


def sample(families, name: str, **labels: str) -> float:  # type: ignore[no-untyped-def]
    return samples(families, name)[tuple(sorted(labels.items()))]


def test_beacon_families_show_each_members_loss_and_age_and_the_detection_mode(dj):
    beacons = {"members": {"S002": {"node": "S002", "loss": 0.3, "age_s": 0.25, "source": "127.0.0.22"}},
               "liveness": {}, "sent": 10, "echoes": 41}  # fmt: skip
    write_pool(dj["data_dir"], leader="S001", epoch=7, beacons=beacons)
    _, families = scrape()
    assert sample(families, "stkrelay_beacon_echoes_total", kmsn=KMSN) == 41
    assert sample(families, "stkrelay_pool_detection", kmsn=KMSN, mode="beacons") == 1
    assert sample(families, "stkrelay_pool_detection", kmsn=KMSN, mode="lease only") == 0
    assert sample(families, "stkrelay_beacon_loss_ratio", kmsn=KMSN, node="S002") == 0.3
    assert 0.25 <= sample(families, "stkrelay_beacon_age_seconds", kmsn=KMSN, node="S002") < 5
    write_pool(dj["data_dir"], leader="S001", epoch=7)
    _, families = scrape()
    assert sample(families, "stkrelay_pool_detection", kmsn=KMSN, mode="lease only") == 1


def test_early_takeovers_are_counted_and_repeated_ones_are_an_alarm_on_panel_api_and_doctor(dj):
    # docs/design.md §13: an on-path attacker who drops beacons and resets connections can force
    # takeovers before the TTL. Each is arbitrated by the store; repeated ones are an alarm.
    import json
    from io import StringIO

    from django.core.management import call_command
    from django.utils import timezone

    from elections.web.panel.site import EARLY_TAKEOVERS_ALARM

    now = timezone.now()
    write_pool(dj["data_dir"], leader="S001", epoch=9)
    event("S002", 1, "elected", 5, now - timedelta(days=3), "S001's agent is gone", cause="gone")
    event("S001", 1, "elected", 6, now - timedelta(hours=2), "lease of S002 expired", cause="expired")

    viewer = test_panel_support.make_user("vera")

    def alarms() -> list:  # type: ignore[type-arg]
        response = client_for(viewer).get("/api/v1/sites")
        return response.json()["sites"][0]["alarms"]

    def doctor() -> tuple[bool, str]:
        out = StringIO()
        try:
            call_command("relayctl", "doctor", "--json", stdout=out)
        except SystemExit:
            pass
        checks = {c["check"]: (c["ok"], c["detail"]) for c in json.loads(out.getvalue())}
        return checks["early takeovers on liveness evidence"]

    for i in range(EARLY_TAKEOVERS_ALARM - 1):
        node = "S002" if i % 2 else "S001"
        event(node, 2 + i, "elected", 7 + i, now - timedelta(hours=1), "the agent is gone", cause="gone")
    _, families = scrape()
    assert sample(families, "stkrelay_early_takeovers_total", kmsn=KMSN) == EARLY_TAKEOVERS_ALARM
    assert "early_takeovers" not in alarms()  # one of them three days ago
    assert doctor()[0] is True
    event("S003", 1, "elected", 9, now - timedelta(minutes=1), "S001's agent is gone", cause="gone")
    assert "early_takeovers" in alarms()
    ok, detail = doctor()
    n = EARLY_TAKEOVERS_ALARM
    assert ok is False and detail.startswith(f"{n} in 24 h, {n + 1} in all")
    _, families = scrape()
    assert sample(families, "stkrelay_early_takeovers_total", kmsn=KMSN) == EARLY_TAKEOVERS_ALARM + 1


def test_a_stale_view_and_an_unreachable_store_are_their_own_families(dj):
    from django.conf import settings

    k = (("kmsn", KMSN),)
    limit = 3 * max(settings.STK.lease_poll, settings.STK.lease_renew) + 2
    write_pool(dj["data_dir"], updated=time.monotonic() - limit - 5, store_reachable=False)
    _, families = scrape()
    assert samples(families, "stkrelay_pool_view_stale") == {k: 1}
    assert samples(families, "stkrelay_pool_view_age_seconds")[k] >= limit + 5
    assert samples(families, "stkrelay_pool_view_stale_after_seconds") == {k: limit}
    assert samples(families, "stkrelay_pool_store_reachable") == {k: 0}
    assert samples(families, "stkrelay_pool_has_leader") == {k: 0}  # a stale view names no leader
    (data := dj["data_dir"] / "pool.json").unlink()
    _, families = scrape()
    assert samples(families, "stkrelay_pool_view_stale") == {k: 1} and not data.exists()
    assert samples(families, "stkrelay_pool_view_age_seconds") == {}  # no view: no age, stale
