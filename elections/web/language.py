"""The panel's language: the browser's (`Accept-Language`, Django's LocaleMiddleware),
else `LANGUAGE_CODE` of the ini; overridden by the user's own choice, which is
remembered per user (`PanelLanguage`, this agent's database) and in a cookie (so the
login page, before anyone is known, speaks it too).

`UserLanguageMiddleware` runs after authentication: a logged-in user's choice wins
over the browser's. It is read once per session (the session keeps it), so a
request costs no query. `choose` (POST /language/) records a choice."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import translation
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from elections.web.auth import secure_headers

SESSION_KEY = "stk_language"


def supported(code: str) -> str | None:
    """`code` if the panel speaks it, else None."""
    code = (code or "").strip().lower()
    return code if code in dict(settings.LANGUAGES) else None


def _stored(user) -> str | None:
    from elections.models import PanelLanguage

    row = PanelLanguage.objects.filter(user=user).values_list("language", flat=True).first()
    return supported(row or "")


class UserLanguageMiddleware:
    """A logged-in user's chosen language, over the browser's (after LocaleMiddleware)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            if SESSION_KEY not in request.session:
                request.session[SESSION_KEY] = _stored(user) or ""
            chosen = supported(request.session.get(SESSION_KEY) or "")
            if chosen:
                translation.activate(chosen)
                request.LANGUAGE_CODE = chosen
        return self.get_response(request)


@receiver(user_logged_in)
def _remember_on_login(sender, request, user, **kwargs) -> None:
    """A new session starts with the user's stored choice (the session was flushed)."""
    if request is not None and hasattr(request, "session"):
        request.session[SESSION_KEY] = _stored(user) or ""


@require_POST
def choose(request: HttpRequest) -> HttpResponse:
    """POST language=<code>&next=<path>: use that language from now on (CSRF-protected
    like every panel form); a logged-in user's choice is stored for them."""
    from elections.models import PanelLanguage

    code = supported(request.POST.get("language", ""))
    nxt = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()}, require_https=False):
        nxt = "/"
    response = redirect(nxt)
    if code is None:
        return secure_headers(response)
    if request.user.is_authenticated:
        PanelLanguage.objects.update_or_create(user=request.user, defaults={"language": code})
        request.session[SESSION_KEY] = code
    response.set_cookie(
        settings.LANGUAGE_COOKIE_NAME, code, max_age=settings.LANGUAGE_COOKIE_AGE,
        secure=settings.SESSION_COOKIE_SECURE, httponly=True, samesite="Lax",
    )  # fmt: skip
    return secure_headers(response)
