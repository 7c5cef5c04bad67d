"""Login throttling: the token buckets on a fake clock, then the panel under a flood
of bad logins from many addresses (Django's test client, real Argon2)."""

from __future__ import annotations

import time

import pytest
import test_panel_support
from test_panel_support import PASSWORD, client_for, make_user

from elections.web.throttle import LoginThrottle, address_key
from stkhost.clock import FakeClock

dj = test_panel_support.dj  # the fixture, under its name here


def throttle(address_max=3, window_s=30.0, rate=1.0, burst=5, **kw):  # type: ignore[no-untyped-def]
    clock = FakeClock()
    return LoginThrottle(address_max, window_s, rate, burst, clock=clock, **kw), clock


def test_an_address_gets_its_failures_then_waits_for_one_to_refill():
    gate, clock = throttle(address_max=3, window_s=30)
    assert [gate.acquire("192.0.2.1") for _ in range(3)] == [0, 0, 0]
    assert gate.acquire("192.0.2.1") == pytest.approx(10)  # 3 per 30 s: one every 10 s
    assert gate.acquire("192.0.2.2") == 0  # another address is not affected
    clock.advance(10)
    assert gate.acquire("192.0.2.1") == 0


def test_everyone_together_gets_the_burst_then_the_rate():
    gate, clock = throttle(address_max=100, rate=2.0, burst=4)
    assert [gate.acquire(f"192.0.2.{i}") for i in range(4)] == [0, 0, 0, 0]
    assert gate.acquire("192.0.2.99") == pytest.approx(0.5)
    clock.advance(0.5)
    assert gate.acquire("192.0.2.99") == 0 and gate.acquire("192.0.2.98") > 0


def test_a_success_gives_its_tokens_back():
    gate, _ = throttle(address_max=1, burst=1)
    assert gate.acquire("192.0.2.1") == 0
    gate.refund("192.0.2.1")
    assert gate.acquire("192.0.2.1") == 0
    assert gate.acquire("192.0.2.1") > 0


def test_ipv6_addresses_count_per_64_and_mapped_ipv4_as_ipv4():
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert address_key("::ffff:192.0.2.1") == "192.0.2.1"
    gate, _ = throttle(address_max=2)
    assert gate.acquire("2001:db8::1") == gate.acquire("2001:db8::2") == 0
    assert gate.acquire("2001:db8::3") > 0


def test_memory_stays_bounded_under_many_addresses():
    gate, _ = throttle(address_max=2, rate=1000, burst=100000, max_addresses=50)
    for i in range(5000):
        gate.acquire(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(gate.addresses) == 50


# -- the panel ------------------------------------------------------------------------------
def post_login(c, username: str, password: str):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    response = c.post("/login/", {"username": username, "password": password})
    return response, time.perf_counter() - started


def test_an_address_is_throttled_across_user_names_before_any_hashing(dj, monkeypatch):
    from django.test import override_settings

    make_user("olga", "operator")
    with override_settings(STK_LOGIN_ADDRESS_MAX_FAILURES=4):
        c = client_for(REMOTE_ADDR="192.0.2.7")
        for i in range(4):
            assert post_login(c, f"user{i}", "wrong-password")[0].status_code == 200
        hashed = []
        monkeypatch.setattr("django.contrib.auth.hashers.Argon2PasswordHasher.verify",
                            lambda *a: hashed.append(a) or True)  # fmt: skip
        blocked, _ = post_login(c, "olga", PASSWORD)
        assert blocked.status_code == 429 and int(blocked["Retry-After"]) > 0
        assert "Too many failed attempts" in blocked.content.decode()
        assert hashed == []  # refused before the password was looked at
        monkeypatch.undo()
        other = client_for(REMOTE_ADDR="192.0.2.8")
        assert post_login(other, "olga", PASSWORD)[0].status_code == 302


def test_a_flood_of_bad_logins_from_many_addresses_gets_429_fast_and_the_panel_stays_quick(dj):
    from django.test import override_settings

    from elections.audit import LoginFailure

    make_user("olga", "operator")
    viewer = client_for(make_user("vera"))
    assert viewer.get("/").status_code == 200
    flood, page = [], []
    # Every one of the 200 addresses is fresh, so the reserve for clean addresses is drawn on too.
    with override_settings(STK_LOGIN_GLOBAL_RATE=1.0, STK_LOGIN_GLOBAL_BURST=3,
                           STK_LOGIN_RESERVE_RATE=0.2, STK_LOGIN_RESERVE_BURST=2):  # fmt: skip
        flood_began = time.perf_counter()
        for i in range(200):
            c = client_for(REMOTE_ADDR=f"10.66.{i // 250}.{i % 250 + 1}")
            flood.append(post_login(c, "olga", f"guess-{i}"))
            if i % 20 == 0:
                started = time.perf_counter()
                assert viewer.get("/").status_code == 200
                page.append(time.perf_counter() - started)
        flood_took = time.perf_counter() - flood_began
    throttled = sorted(t for r, t in flood if r.status_code == 429)
    hashed = [t for r, t in flood if r.status_code == 200]
    assert all(r.status_code in (200, 429) for r, _ in flood)
    # The buckets let through their bursts and their rates over the flood's own wall time (on a
    # loaded machine the 200 posts take longer, and the rates let more through): never more.
    allowed = 3 + 2 + (1.0 + 0.2) * flood_took + 1
    assert len(hashed) <= allowed and len(throttled) >= 200 - allowed, (len(hashed), flood_took)
    assert all(r["Retry-After"].isdigit() for r, _ in flood if r.status_code == 429)
    # Generous bounds for a shared 2-core machine: a 429 costs no hash (one Argon2 is ~0.1-0.2 s).
    assert throttled[int(len(throttled) * 0.95)] < 0.05, throttled[-10:]
    assert max(page) < 1.0, page
    spent = sum(t for _, t in flood)
    assert LoginFailure.objects.count() == len(hashed) <= 3 + 1.0 * spent + 2 + 0.2 * spent + 1


# -- strangers cannot lock the operators out (issue 28) ----------------------------------------
def test_a_clean_address_draws_on_the_reserve_once_strangers_emptied_the_bucket_for_everyone():
    gate, clock = throttle(address_max=20, window_s=300, rate=0.5, burst=2, reserve_rate=0.1, reserve_burst=2)
    strangers = [f"192.0.2.{i}" for i in range(8)]
    assert [gate.acquire(ip) for ip in strangers[:2]] == [0, 0]  # the global burst, spent on failures
    # Each stranger has failed now or fails next; none is clean, none gets the reserve.
    assert all(gate.acquire(ip) > 0 for ip in strangers[:2])
    assert gate.acquire(strangers[2]) == 0  # a first failure draws on the reserve...
    assert gate.acquire(strangers[2]) > 0  # ...but never a second: that address is unclean now
    assert gate.acquire("198.51.100.7") == 0  # the operator, from an address that never failed
    assert gate.refused["global"] == 3 and gate.refused["address"] == 0
    clock.advance(300)  # a window later the strangers' addresses are clean again, one token each
    assert gate.acquire(strangers[0]) == 0


def test_the_reserve_is_spent_only_by_failures_and_refilled_by_successes():
    gate, _ = throttle(address_max=20, rate=1e-6, burst=1, reserve_rate=1e-6, reserve_burst=1)
    assert gate.acquire("192.0.2.1") == 0  # the global token
    assert gate.acquire("198.51.100.1") == 0  # the reserve's one token
    gate.refund("198.51.100.1")  # ...who logged in: it goes back
    assert gate.acquire("198.51.100.2") == 0
    assert gate.acquire("198.51.100.3") > 0  # spent by a failure: nothing left


def test_an_address_locked_out_is_listed_and_an_operator_can_lift_it():
    gate, _ = throttle(address_max=2, window_s=30)
    for _ in range(2):
        gate.acquire("192.0.2.1")
    assert [x.address for x in gate.lockouts()] == ["192.0.2.1"] and gate.lockouts()[0].wait_s > 0
    assert gate.clear("192.0.2.1") == 1 and gate.lockouts() == []
    assert gate.acquire("192.0.2.1") == 0


def stranger_flood(n: int, password: str = "guess"):  # type: ignore[no-untyped-def]
    """n bad logins as 'olga', spread over 8 addresses (under the per-address limit)."""
    results = []
    for i in range(n):
        c = client_for(REMOTE_ADDR=f"10.66.0.{i % 8 + 1}")
        results.append(post_login(c, "olga", f"{password}-{i}")[0].status_code)
    return results


def test_strangers_failing_from_eight_addresses_never_keep_the_operator_out(dj):
    """The issue-28 scenario: bad logins spread over ~8 addresses kept a correct
    login from another address at 429 nine times in a row. Now the operator gets
    in on the first try, nine times over, while the strangers keep failing."""
    from django.test import override_settings

    make_user("olga", "operator")
    # The strangers' eight addresses may each draw on the reserve once, before they first fail.
    # (Refill rates near zero: what a loaded machine's slow hashes would refill meanwhile
    # must not decide the test; the buckets' rates are the unit tests' business.)
    with override_settings(STK_LOGIN_GLOBAL_RATE=1e-6, STK_LOGIN_GLOBAL_BURST=2,
                           STK_LOGIN_RESERVE_RATE=1e-6, STK_LOGIN_RESERVE_BURST=10):  # fmt: skip
        first = stranger_flood(16)
        assert first.count(200) == 2 + 6 and first.count(429) == 8, first  # everyone's bucket is empty
        for attempt in range(9):
            assert stranger_flood(4).count(429) == 4  # ...and the strangers keep being refused
            operator = client_for(REMOTE_ADDR=f"198.51.100.{attempt + 1}")
            response, _ = post_login(operator, "olga", PASSWORD)
            assert response.status_code == 302, f"attempt {attempt}: {response.status_code}"


def test_a_browser_that_logged_in_before_gets_in_whatever_strangers_did(dj):
    from django.test import override_settings

    from elections.web import device

    make_user("olga", "operator")
    browser = client_for(REMOTE_ADDR="198.51.100.20")
    assert post_login(browser, "olga", PASSWORD)[0].status_code == 302
    cookie = browser.cookies[device.COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    browser.post("/logout/")
    with override_settings(STK_LOGIN_GLOBAL_RATE=1e-6, STK_LOGIN_GLOBAL_BURST=1,
                           STK_LOGIN_RESERVE_RATE=1e-6, STK_LOGIN_RESERVE_BURST=1):  # fmt: skip
        stranger_flood(6)  # the bucket for everyone and the reserve are both empty now
        fresh = client_for(REMOTE_ADDR="198.51.100.21")
        assert post_login(fresh, "olga", PASSWORD)[0].status_code == 429  # nothing left for a new one
        assert post_login(browser, "olga", PASSWORD)[0].status_code == 302  # the known browser gets in
        # A cookie for another user, or a forged one, is no device.
        other = client_for(REMOTE_ADDR="198.51.100.22")
        other.cookies[device.COOKIE] = browser.cookies[device.COOKIE].value
        assert post_login(other, "mallory", "x")[0].status_code == 429
        other.cookies[device.COOKIE] = "eyJ1Ijoib2xnYSIsImQiOiJ4In0:forged:sig"
        assert post_login(other, "olga", PASSWORD)[0].status_code == 429
        # A stolen device cookie buys only that device's own few failures.
        thief = client_for(REMOTE_ADDR="198.51.100.23")
        thief.cookies[device.COOKIE] = browser.cookies[device.COOKIE].value
        codes = [post_login(thief, "olga", f"wrong-{i}")[0].status_code for i in range(7)]
        assert codes[:5] == [200] * 5 and codes[5:] == [429, 429], codes


def test_the_lockouts_page_lists_them_and_only_an_operator_lifts_them_with_an_audit_row(dj):
    from django.test import override_settings

    from elections.audit import AuditEntry

    make_user("olga", "operator")
    viewer, operator = client_for(make_user("vera")), client_for(make_user("otto", "operator"))
    with override_settings(STK_LOGIN_ADDRESS_MAX_FAILURES=2):
        bad = client_for(REMOTE_ADDR="192.0.2.66")
        codes = [post_login(bad, "olga", f"wrong-{i}")[0].status_code for i in range(3)]
        assert codes == [200, 200, 429]
        page = viewer.get("/lockouts/").content.decode()
        assert "192.0.2.66" in page and "Unlock" not in page
        assert viewer.post("/lockouts/", {"address": "192.0.2.66"}).status_code == 403
        metrics = operator.get("/metrics").content.decode()
        assert 'stkrelay_login_lockouts{scope="address"} 1.0' in metrics
        assert 'stkrelay_login_refused_total{scope="address"} 1.0' in metrics
        assert operator.post("/lockouts/", {"address": "192.0.2.66"}).status_code == 302
        assert "192.0.2.66" not in operator.get("/lockouts/").content.decode()
        assert post_login(bad, "olga", "wrong-again")[0].status_code == 200
    row = AuditEntry.objects.filter(action="unlock_login", phase="outcome").get()
    assert row.user == "otto" and row.target == "192.0.2.66" and row.result == "accepted"


def test_a_forged_forwarded_for_from_an_untrusted_peer_changes_neither_the_throttle_nor_the_record(dj):
    # Review item: X-Forwarded-For is believed only from WEB_TRUSTED_PROXIES. An attacker who
    # sends a new forged address with every attempt is still one address to the throttle, and
    # the failures are recorded under its real address.
    from django.test import override_settings

    from elections.audit import LoginFailure

    with override_settings(STK_LOGIN_ADDRESS_MAX_FAILURES=3, STK_TRUSTED_PROXIES=["10.0.0.0/24"]):
        c = client_for(REMOTE_ADDR="192.0.2.66")
        forged = [{"HTTP_X_FORWARDED_FOR": f"203.0.113.{n}"} for n in range(5)]
        login = {"username": "u", "password": "x"}
        attempts = [c.post("/login/", login, **f) for f in forged]
        codes = [r.status_code for r in attempts]
        assert codes == [200, 200, 200, 429, 429]
        assert set(LoginFailure.objects.values_list("client", flat=True)) == {"192.0.2.66"}
        # Through a configured proxy the forwarded address is the client (and says so).
        via = client_for(REMOTE_ADDR="10.0.0.5")
        via.post("/login/", {"username": "w", "password": "wrong"}, HTTP_X_FORWARDED_FOR="198.51.100.7")
        assert LoginFailure.objects.filter(username="w").get().client == "198.51.100.7 (via 10.0.0.5)"
