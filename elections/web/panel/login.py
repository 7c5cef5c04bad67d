"""The panel's login and logout. Logging in is throttled before the password is
hashed (`elections.web.throttle`: per client address, and for everyone with a
reserve for clean addresses, in memory), then per (user, address) — or per
(user, device) for a browser that logged in before (`elections.web.device`) —
in the database (`audit.LoginFailure`); every refusal is 429 with Retry-After."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.auth import login, logout
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from elections import audit
from elections.web import device, throttle
from elections.web.auth import client_address, client_ip, is_loopback, secure_headers


@require_http_methods(["GET", "POST"])
def login_view(request: HttpRequest) -> HttpResponse:
    """Django auth, throttled before the password is hashed: per client address and
    for everyone together (`throttle.login_throttle`, in memory), then
    STK_LOGIN_MAX_FAILURES per (user, address) per window (the database) → 429."""
    nxt = request.POST.get("next") or request.GET.get("next") or "/"
    if not url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()}):
        nxt = "/"
    if request.method != "POST":
        return _login_page(request, AuthenticationForm(request), nxt)
    username = (request.POST.get("username") or "")[:150]
    ip, client = client_ip(request), client_address(request)
    known = device.device_of(request, username)
    gate = throttle.login_throttle()
    # A known device or the console is bounded by its own failures, never by strangers'.
    wait = gate.acquire(ip, everyone=not (known or is_loopback(request)))
    if wait:
        return _throttled(request, nxt, wait, _("from your address or on this panel"))
    failures_of = device.client_key(known) if known else client
    wait = audit.LoginFailure.blocked_for(username, failures_of)
    if wait:
        gate.refund(ip)
        return _throttled(request, nxt, wait, _("for this user from your address"))
    form = AuthenticationForm(request, data=request.POST)
    if form.is_valid():
        gate.refund(ip)
        audit.LoginFailure.forget(username, failures_of)
        login(request, form.get_user())
        response = redirect(nxt)
        device.remember_device(response, request, username)
        return secure_headers(response)
    audit.LoginFailure.note(username, failures_of)
    return _login_page(request, form, nxt)


def _login_page(request: HttpRequest, form: AuthenticationForm, nxt: str, **extra: Any) -> HttpResponse:
    ctx = {"form": form, "next": nxt, "title": _("Log in"), **extra}
    status = 429 if "throttled" in extra else 200
    return secure_headers(render(request, "panel/login.html", ctx, status=status))


def _throttled(request: HttpRequest, nxt: str, wait: float, by: str) -> HttpResponse:
    seconds = math.ceil(wait)
    response = _login_page(request, AuthenticationForm(request), nxt, throttled=seconds, throttled_by=by)
    response["Retry-After"] = str(seconds)
    return response


@require_POST
def logout_view(request: HttpRequest) -> HttpResponse:
    logout(request)
    return secure_headers(redirect(settings.LOGIN_URL))
