"""Root URLs: the agent's health, the admin panel, the JSON API, metrics, static files."""

from django.conf import settings
from django.urls import path, re_path
from django.views.static import serve

from elections.web import api, health, language, metrics, openapi
from elections.web.panel import audit_log, lockouts
from elections.web.panel import login as panel_login
from elections.web.panel import views as panel

KMSN = "<str:kmsn>"

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    # panel
    path("login/", panel_login.login_view, name="panel-login"),
    path("logout/", panel_login.logout_view, name="panel-logout"),
    path("language/", language.choose, name="panel-language"),
    path("", panel.sites, name="panel-sites"),
    path(f"sites/{KMSN}/", panel.site, name="panel-site"),
    path(f"sites/{KMSN}/progress/<str:correlation>/", panel.command_progress, name="panel-progress"),
    path(f"sites/{KMSN}/<str:kind>/", panel.confirm, name="panel-confirm"),
    path("history/", panel.history, name="panel-history"),
    path("history.csv", panel.history_csv, name="panel-history-csv"),
    path("audit/", audit_log.audit_log, name="panel-audit"),
    path("lockouts/", lockouts.lockouts, name="panel-lockouts"),
    # API
    path("api/v1/openapi.json", openapi.openapi_json, name="api-openapi"),
    path("api/v1/leader", api.leader, name="api-leader"),
    path("api/v1/sites", api.sites, name="api-sites"),
    path(f"api/v1/sites/{KMSN}", api.site, name="api-site"),
    path(f"api/v1/sites/{KMSN}/members", api.site_members, name="api-members"),
    path(f"api/v1/sites/{KMSN}/lease", api.site_lease, name="api-lease"),
    path(f"api/v1/sites/{KMSN}/addresses", api.site_addresses, name="api-addresses"),
    path(f"api/v1/sites/{KMSN}/<str:kind>", api.command, name="api-command"),
    path("api/v1/history", api.history, name="api-history"),
    path("api/v1/audit", api.audit_log, name="api-audit"),
    re_path(r"^api/v1/(?P<rest>.*)$", api.not_found, name="api-not-found"),
    # The agent's web port is Daphne alone: it serves the few static files itself.
    re_path(r"^static/(?P<path>.*)$", serve, {"document_root": settings.ASSETS_DIR / "static"}),
]
