"""Live sections: pages that refresh themselves without reload, cheaply.

A page is a template plus named *sections* (`id -> template`). Each section is
rendered into `<div id=... data-v=VERSION>` where VERSION is a hash of its
HTML. The page's poller (`static/panel.js` + htmx, every 2 s while the tab is
visible) sends the versions it has (`_v=id:version,...`); the server answers
204 when nothing changed, else only the changed sections as htmx out-of-band
swaps. Sections must not contain CSRF tokens (they would change every render).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import mark_safe

POLL_PARAM = "_poll"
VERSIONS_PARAM = "_v"


def is_poll(request: HttpRequest) -> bool:
    return bool(request.headers.get("HX-Request")) and request.GET.get(POLL_PARAM) == "1"


def _versions(raw: str) -> dict[str, str]:
    out = {}
    for item in raw.split(","):
        sid, _, version = item.partition(":")
        if sid and version:
            out[sid] = version
    return out


def render_live(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    sections: Mapping[str, str],
    status: int = 200,
) -> HttpResponse:
    html = {sid: render_to_string(tpl, context, request) for sid, tpl in sections.items()}
    versions = {sid: hashlib.sha1(h.encode()).hexdigest()[:16] for sid, h in html.items()}
    if is_poll(request):
        have = _versions(request.GET.get(VERSIONS_PARAM, ""))
        changed = [sid for sid in sections if have.get(sid) != versions[sid]]
        if not changed:
            return HttpResponse(status=204)
        body = "".join(
            format_html(
                '<div id="{}" data-v="{}" hx-swap-oob="true">{}</div>',
                sid,
                versions[sid],
                mark_safe(html[sid]),
            )
            for sid in changed
        )
        return HttpResponse(body)
    context["sec"] = {  # templates use {{ sec.site_members }} for id "site-members"
        sid.replace("-", "_"): format_html(
            '<div id="{}" data-v="{}">{}</div>', sid, versions[sid], mark_safe(html[sid])
        )
        for sid in sections
    }
    return render(request, template, context, status=status)
