"""The panel's side of TLS with Django's test client: every member's certificate
fingerprint on the site page and in the API, the plain-HTTP warning on every page
(WEB_PLAIN = 1 on a LAN address), and cookies that never travel in clear."""

from __future__ import annotations

import json
import re

import pytest
import test_panel_support
from test_panel_support import KMSN, PASSWORD, client_for, make_user, member, write_pool

from stkhost.fingerprints import show

dj = test_panel_support.dj  # the fixture, under its name here
FP = "0123456789abcdef" * 4


def _pool(dj):  # type: ignore[no-untyped-def]
    members = {
        "S001": {**member(ip="127.0.0.21"), "web_tls": FP},
        "S002": {**member(ip="127.0.0.22"), "web_tls": ""},
        "S003": {**member(ip="127.0.0.23"), "web_tls": "<script>alert(1)</script>"},  # hostile: no evidence
    }
    write_pool(dj["data_dir"], members=members)


def test_the_site_page_shows_each_members_certificate_fingerprint_for_the_others_to_check(dj):
    _pool(dj)
    page = client_for(make_user("vera")).get(f"/sites/{KMSN}/").content.decode()
    shown = dict(re.findall(r'data-web-tls="(S00\d)">(.*?)</dd>', page))
    assert f"SHA-256 {show(FP)}" in shown["S001"]
    assert "plain HTTP" in shown["S002"]
    assert "not given" in shown["S003"] and "<script>alert" not in page


def test_the_api_gives_each_members_certificate_fingerprint(dj):
    _pool(dj)
    c = client_for(make_user("vera"))
    members = json.loads(c.get(f"/api/v1/sites/{KMSN}/members").content)["members"]
    assert [m["web_tls_sha256"] for m in members] == [FP, "", None]


@pytest.mark.parametrize("url", ["/login/", "/", f"/sites/{KMSN}/", "/history/", "/audit/"])
def test_plain_http_on_a_lan_address_is_a_warning_on_every_page(dj, url):
    from django.test import override_settings

    write_pool(dj["data_dir"])
    c = client_for(make_user("vera"))
    assert 'id="plain-http"' not in c.get(url).content.decode()
    with override_settings(STK_PLAIN_ON_LAN=True):
        page = c.get(url).content.decode()
    assert 'id="plain-http"' in page and "cross the network in clear" in page


def test_over_tls_the_session_and_csrf_cookies_are_secure_and_browsers_are_told_hsts(dj):
    make_user("olga", "operator")
    c = client_for()
    login = c.get("/login/", secure=True)
    assert login.cookies["stk_csrf"]["secure"] is True
    assert login["Strict-Transport-Security"].startswith("max-age=")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.content.decode()).group(1)
    landed = c.post(
        "/login/", {"username": "olga", "password": PASSWORD, "csrfmiddlewaretoken": csrf}, secure=True
    )
    assert landed.status_code == 302
    assert (
        landed.cookies["stk_session"]["secure"] is True and landed.cookies["stk_session"]["httponly"] is True
    )
