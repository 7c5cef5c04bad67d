"""What every panel page shares: the page size and the base template context."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils.translation import gettext_lazy

from elections.web.auth import role_of
from elections.web.panel.fmt import zone_name

PAGE_SIZE = 50
ROLE_WORDS = {"operator": gettext_lazy("operator"), "viewer": gettext_lazy("viewer"),
              "superuser": gettext_lazy("superuser"), "no role": gettext_lazy("no role")}  # fmt: skip


def base_context(request: HttpRequest, title: str, alarm: bool = False, **extra: Any) -> dict[str, Any]:
    """Title, alarm state (tab title and favicon), the user's role, this agent, the nav entry."""
    return {
        "title": title,
        "alarm": alarm,
        "role": role_of(request.user),
        "role_text": ROLE_WORDS.get(role_of(request.user), ""),
        "zone": zone_name(),
        "agent": settings.STK.node,
        "nav": request.resolver_match.url_name if request.resolver_match else "",
        **extra,
    }


def transport(request: HttpRequest) -> dict[str, Any]:
    """Template context on every page: `plain_on_lan` when WEB_PLAIN = 1 serves a LAN
    address, so the login page itself warns that the password crosses the LAN in clear."""
    return {"plain_on_lan": settings.STK_PLAIN_ON_LAN}
