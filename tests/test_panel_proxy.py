"""The panel and /metrics on RELAY_KIND = exec: the fencing proxy's counters and the external
relay's state, from relay.json as relay/runner/serve.py writes it (real Django, real files)."""

from __future__ import annotations

import json

import test_panel_support
from test_panel_support import KMSN, client_for, make_user, write_leading, write_pool, write_relay

from relay.server.fencing_proxy import FencingProxy

SITE = f"/sites/{KMSN}/"
dj = test_panel_support.dj


def proxy_snapshot(accepting: bool = True, **external) -> dict:
    """A real FencingProxy's snapshot (never started: the counters set by hand), plus the external part."""
    proxy = FencingProxy(gate=lambda: True, upstream=("127.0.0.1", 9540), max_connections=100)
    proxy.addresses = {"json": ("127.0.0.21", 9530), "passthrough": ("127.0.0.21", 9531)}
    proxy.accepted, proxy.bytes = 12, {"up": 4096, "down": 8192}
    proxy.refused, proxy.closes = {"gate_shut": 2}, {"ended": 11, "relay_down": 1}
    snap = proxy.snapshot()
    snap["external"] = {"command": "relay_server", "pid": 4242, "accepting": accepting, "restarts": 3,
                        "last_error": "exited with 7", **external}  # fmt: skip
    return snap


def test_the_site_page_says_an_external_relay_runs_behind_the_proxy_with_its_counters(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], proxy_snapshot())
    page = client_for(make_user("vera")).get(SITE).content.decode()
    assert 'id="relay-kind-exec"' in page and "External relay relay_server (RELAY_KIND = exec)" in page
    assert "127.0.0.1:9540/9541" in page and "json 127.0.0.21:9530" in page and "3 restarts" in page
    assert "gate_shut: 2" in page and 'id="relay-keys"' not in page  # no built-in sessions table


def test_a_leader_whose_external_relay_does_not_accept_says_so_and_why(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], proxy_snapshot(accepting=False))
    path = dj["data_dir"] / "relay.json"
    path.write_text(path.read_text().replace('"listening": true', '"listening": false'))
    page = client_for(make_user("vera")).get(SITE).content.decode()
    assert "not accepting" in page and "exited with 7" in page
    assert "its relay is not serving: the external relay relay_server does not accept yet" in page


def test_metrics_carry_the_proxy_families(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], {**proxy_snapshot(), "external": {"accepting": True, "restarts": 3}})
    body = client_for(make_user("vera")).get("/metrics").content.decode()
    assert f'stkrelay_proxy_upstream_up{{kmsn="{KMSN}"}} 1.0' in body
    assert f'stkrelay_proxy_accepted_total{{kmsn="{KMSN}"}} 12.0' in body
    assert f'stkrelay_proxy_refused_total{{cause="gate_shut",kmsn="{KMSN}"}} 2.0' in body
    assert f'stkrelay_proxy_bytes_total{{direction="down",kmsn="{KMSN}"}} 8192.0' in body
    assert f'stkrelay_proxy_upstream_restarts_total{{kmsn="{KMSN}"}} 3.0' in body


def test_hostile_or_broken_proxy_fields_in_relay_json_show_as_nothing(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], {"kind": "exec", "external": ["not", "a", "dict"], "refused": "x",
                                 "listening": {"json": "nope"}, "bytes_up": True, "upstream": 5})  # fmt: skip
    response = client_for(make_user("vera")).get(SITE)
    assert response.status_code == 200 and 'id="relay-kind-exec"' in response.content.decode()


def test_the_api_says_which_relay_kind_runs_with_the_proxys_counters(dj):
    write_pool(dj["data_dir"], leader="S001")
    write_leading(dj["data_dir"])
    write_relay(dj["data_dir"], proxy_snapshot())
    doc = json.loads(client_for(make_user("vera")).get(f"/api/v1/sites/{KMSN}").content)
    relay = doc["relay"]
    assert relay["kind"] == "exec" and relay["running"] is True
    proxy = relay["proxy"]
    assert (proxy["command"], proxy["accepting"], proxy["accepted"], proxy["bytes_down"]) == (
        "relay_server", True, 12, 8192)  # fmt: skip
    assert proxy["refused"] == {"gate_shut": 2} and proxy["upstream"] == "127.0.0.1:9540/9541"
