"""Device cookies: a browser that has logged in as a user before is let through
the global login throttle for that user (OWASP, "Slow Down Online Guessing
Attacks with Device Cookies").

After a successful login the browser gets `stk_device`, a value signed with the
site's `SECRET_KEY` (`django.core.signing`) naming the user and a random id.
An attempt that presents a valid one for the user it logs in as is bounded by
the failures of that device (`LoginFailure` keyed `device:<id>`) and its address,
never by what strangers elsewhere did: they cannot make such a cookie without
the user's password. A stolen cookie only buys its holder that device's own
few attempts per window, which a wrong password uses up.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core import signing
from django.http import HttpRequest, HttpResponse

COOKIE = "stk_device"
SALT = "stkrelay.login.device"
MAX_COOKIE = 512  # bytes of cookie looked at: anything longer is no device


def _max_age_s() -> int:
    return int(getattr(settings, "STK_LOGIN_DEVICE_DAYS", 30)) * 86400


def device_of(request: HttpRequest, username: str) -> str | None:
    """The device id of a valid, unexpired device cookie issued to `username`, else None."""
    raw = request.COOKIES.get(COOKIE, "")
    if not raw or len(raw) > MAX_COOKIE:
        return None
    try:
        doc = signing.loads(raw, salt=SALT, max_age=_max_age_s())
    except signing.BadSignature:  # also SignatureExpired
        return None
    if not isinstance(doc, dict) or doc.get("u") != username or not isinstance(doc.get("d"), str):
        return None
    return doc["d"][:32]


def remember_device(response: HttpResponse, request: HttpRequest, username: str) -> None:
    """Give the browser that just logged in as `username` its device cookie."""
    value = signing.dumps({"u": username, "d": secrets.token_hex(16)}, salt=SALT)
    response.set_cookie(
        COOKIE, value, max_age=_max_age_s(), httponly=True, samesite="Strict",
        secure=request.is_secure() or settings.SESSION_COOKIE_SECURE,
    )  # fmt: skip


def client_key(device: str) -> str:
    """The `LoginFailure` client a device's failures are counted under."""
    return f"device:{device}"
