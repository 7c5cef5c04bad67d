"""The login lockouts page: which addresses, and which (user, client) pairs,
may not try to log in again yet, and an operator's button that lifts one or
all of them (audited like every operator command).

The addresses are this agent's own web process's (`throttle.login_throttle`,
in memory); the pairs are its database's (`audit.LoginFailure`). Neither is a
pool-wide state: each agent's panel throttles its own logins.
"""

from __future__ import annotations

import secrets

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from elections import audit, steering
from elections.web import throttle
from elections.web.auth import client_address, denial, panel_view
from elections.web.panel.page import base_context

ACTION = "unlock_login"


@panel_view
@require_http_methods(["GET", "POST"])
def lockouts(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _clear(request)
    ctx = base_context(
        request, _("Login lockouts"),
        addresses=throttle.login_throttle().lockouts(),
        pairs=audit.LoginFailure.locked(),
        refused=throttle.login_throttle().refused,
        may_clear=not denial(request.user, ACTION),
    )  # fmt: skip
    return render(request, "panel/lockouts.html", ctx)


def _clear(request: HttpRequest) -> HttpResponse:
    why = denial(request.user, ACTION)
    if why:
        return render(request, "panel/lockouts.html", base_context(request, _("Login lockouts"), denied=why),
                      status=403)  # fmt: skip
    address = (request.POST.get("address") or "")[:64] or None
    username = (request.POST.get("username") or "")[:150]
    client = (request.POST.get("client") or "")[:200]
    if username and client:
        n = audit.LoginFailure.objects.filter(username=username, client=client).delete()[0]
        target, message = f"{username}@{client}", _("%(n)d failure(s) forgotten") % {"n": n}
    else:
        n = throttle.login_throttle().clear(address)
        target, message = address or "*", _("%(n)d address(es) unlocked") % {"n": n}
    _audit(request, target[:64], message)
    messages.success(request, message)
    return redirect("panel-lockouts")


def _audit(request: HttpRequest, target: str, message: str) -> None:
    base = dict(user=request.user.get_username()[:150], client=client_address(request)[:200], via="panel",
                action=ACTION, target=target, correlation=secrets.token_hex(8))  # fmt: skip
    trail = steering.audit_trail()
    try:
        trail.append(phase=audit.AuditEntry.INTENT, **base)
        trail.append(phase=audit.AuditEntry.OUTCOME, result="accepted", message=message, **base)
    except audit.AuditUnavailable:
        pass  # lifting a lockout is never refused for want of a record: it only ever lets in
