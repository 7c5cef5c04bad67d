"""Who may do what in the panel and the API, and how requests are authenticated.

Roles are Django groups: `viewer` (sees everything, changes nothing) and
`operator` (may also drain/undrain: `elections.drain_member`; promote, pause
and resume, and unbind a station from its credential: `elections.promote_member`).
Superusers have every permission.
`ensure_roles()` creates the groups; `python manage.py stkuser` calls it.

Panel pages use `panel_view`: login required; an htmx request whose session
has expired gets 401 with `HX-Redirect` to the login page (so a polled table
never turns into a login form). API views use `api_view`: a session (with
CSRF on unsafe methods) or `Authorization: Bearer stk_...` (no CSRF: no
cookie is involved); unauthenticated → 401 JSON.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt

from elections.steering import Actor

VIEWER, OPERATOR = "viewer", "operator"
ROLES = {
    VIEWER: [],
    OPERATOR: ["drain_member", "promote_member"],
}
# Which permission each operator command needs.
PERMISSION_FOR = {
    "drain": "elections.drain_member",
    "undrain": "elections.drain_member",
    "promote": "elections.promote_member",
    "pause": "elections.promote_member",
    "resume": "elections.promote_member",
    "unlock_login": "elections.drain_member",  # lift a login lockout: an operator's
    "unbind": "elections.promote_member",  # lets the site token take a station again: the stronger role
    "forget": "elections.promote_member",  # retires a member (its record removed): the stronger role too
}

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)


def ensure_roles() -> None:
    """Create the viewer and operator groups with their permissions (idempotent)."""
    from django.contrib.auth.models import Group, Permission

    for role, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        perms = list(Permission.objects.filter(content_type__app_label="elections", codename__in=codenames))
        missing = set(codenames) - {p.codename for p in perms}
        if missing:
            raise RuntimeError(f"permissions {sorted(missing)} missing: run `manage.py migrate` first")
        group.permissions.set(perms)


def role_of(user: Any) -> str:
    if not getattr(user, "is_authenticated", False):
        return "anonymous"
    if user.is_superuser:
        return "superuser"
    names = {g.name for g in user.groups.all()}
    return OPERATOR if OPERATOR in names else VIEWER if VIEWER in names else "no role"


def denial(user: Any, kind: str) -> str:
    """Why `user` may not issue command `kind` ('' if allowed)."""
    perm = PERMISSION_FOR.get(kind)
    if perm is None:
        return _("unknown command %(kind)r") % {"kind": kind}
    if not user.has_perm(perm):
        return _("needs the operator role (permission %(perm)s)") % {"perm": perm.split(".", 1)[1]}
    return ""


def actor_for(user: Any, request: HttpRequest, via: str) -> Actor:
    """The steering service's `Actor` for a logged-in user (panel) or a token (api)."""
    return Actor(user=user.get_username(), client=client_address(request), via=via,
                 denial=lambda kind: denial(user, kind) or None)  # fmt: skip


def _trusted(ip: str, proxies: list[str]) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(addr in ipaddress.ip_network(net) for net in proxies)


def client_ip(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, unless that peer is one of WEB_TRUSTED_PROXIES
    (`STK_TRUSTED_PROXIES`); then X-Forwarded-For is read from the right, past every
    trusted proxy, up to the first hop that is not one (a malformed hop ends the walk:
    the last trusted hop is the client then). Anyone else's X-Forwarded-For is ignored."""
    remote = request.META.get("REMOTE_ADDR", "") or "unknown"
    proxies = list(getattr(settings, "STK_TRUSTED_PROXIES", ()) or ())
    if not proxies or not _trusted(remote, proxies):
        return remote
    chain = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    client = remote
    for hop in reversed(chain):
        try:
            hop = str(ipaddress.ip_address(hop))
        except ValueError:
            break
        client = hop
        if not _trusted(hop, proxies):
            break
    return client


def client_address(request: HttpRequest) -> str:
    """As recorded in the audit trail: `client_ip`, with '(via proxy)' when it came
    through a trusted proxy's X-Forwarded-For."""
    remote = request.META.get("REMOTE_ADDR", "") or "unknown"
    ip = client_ip(request)
    return ip if ip == remote else f"{ip} (via {remote})"


def is_loopback(request: HttpRequest) -> bool:
    """The client (not a trusted proxy relaying someone else) is on this machine."""
    try:
        return ipaddress.ip_address(client_ip(request)).is_loopback
    except ValueError:
        return False


def secure_headers(response: HttpResponse) -> HttpResponse:
    response.setdefault("Content-Security-Policy", CSP)
    response.setdefault("Cache-Control", "no-store")
    response.setdefault("Referrer-Policy", "same-origin")
    response.setdefault("Vary", "Cookie, HX-Request")
    return response


def _login_url(next_path: str) -> str:
    return f"{settings.LOGIN_URL}?{urlencode({'next': next_path})}"


def panel_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Login required; htmx requests of an expired session are sent to the login page."""

    @wraps(view)
    def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            if request.headers.get("HX-Request"):
                current = urlsplit(request.headers.get("HX-Current-URL", ""))
                back = current.path + (f"?{current.query}" if current.query else "") or "/"
                response = HttpResponse(_("session expired"), status=401, content_type="text/plain")
                response["HX-Redirect"] = _login_url(back)
                return secure_headers(response)
            return secure_headers(redirect(_login_url(request.get_full_path())))
        return secure_headers(view(request, *args, **kwargs))

    return inner


def bearer_user(request: HttpRequest) -> Any | bool | None:
    """The token's user; None without an Authorization header; False for a bad one."""
    header = request.headers.get("Authorization", "")
    if not header:
        return None
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return False
    from elections.audit import ApiToken

    return ApiToken.user_for(key.strip()) or False


def api_error(status: int, code: str, message: str, **extra: Any) -> JsonResponse:
    response = JsonResponse({"error": code, "message": message, **extra}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="stkrelay"'
    return response


def api_view(
    methods: tuple[str, ...] = ("GET",), public: Callable[[HttpRequest], bool] | None = None
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Authenticate an API request (bearer token, else session + CSRF on unsafe
    methods); `request.api_user` and `request.api_via` are set for the view."""

    def deco(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_exempt
        @wraps(view)
        def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                response = api_error(
                    405, "method_not_allowed", _("use %(methods)s") % {"methods": " or ".join(methods)}
                )
                response["Allow"] = ", ".join(methods)
                return secure_headers(response)
            token_user = bearer_user(request)
            if token_user is False:
                return secure_headers(api_error(401, "bad_token", _("unknown, revoked or malformed token")))
            if token_user is not None:
                request.api_user, request.api_via = token_user, "api-token"
            elif request.user.is_authenticated:
                request.api_user, request.api_via = request.user, "api-session"
                if request.method not in ("GET", "HEAD", "OPTIONS"):
                    rejected = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(
                        request, None, (), {}
                    )
                    if rejected is not None:
                        return secure_headers(
                            api_error(403, "csrf", _("CSRF check failed: send the X-CSRFToken header"))
                        )
            elif public is not None and public(request):
                request.api_user, request.api_via = None, "public"
            else:
                return secure_headers(
                    api_error(401, "unauthenticated", _("log in, or send Authorization: Bearer <token>"))
                )
            return secure_headers(view(request, *args, **kwargs))

        return inner

    return deco
