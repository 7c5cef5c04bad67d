"""ASGI entry point: HTTP (panel, API; bodies bounded by `elections.web.body_limit.BodyLimit`,
Host checked against ALLOWED_HOSTS by Django) and the relay's WebSocket routes (Origin
checked by `elections.web.origin.OriginCheck`)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stkrelay.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import path  # noqa: E402

from elections.web.body_limit import BodyLimit  # noqa: E402
from elections.web.origin import OriginCheck  # noqa: E402
from relay.web.ws import RelayBridge, StreamBridge  # noqa: E402
from relay.web.ws_flow import WriteBuffer  # noqa: E402

application = ProtocolTypeRouter(
    {
        # A body over DATA_UPLOAD_MAX_MEMORY_SIZE is 413 before Django reads it: one log line.
        "http": BodyLimit(django_asgi_app, settings.DATA_UPLOAD_MAX_MEMORY_SIZE),
        # A browser's Origin must be one of ALLOWED_HOSTS; only /ws/relay/ (relay-token
        # handshake, no cookie) takes non-browser clients without one (elections/web/origin.py).
        # Outermost: what the server holds for each connection, read by the bridges' bound
        # (relay/web/ws_flow.py) before any middleware wraps send and receive.
        "websocket": WriteBuffer(
            OriginCheck(
                AuthMiddlewareStack(
                    URLRouter(
                        [
                            path("ws/relay/", RelayBridge.as_asgi()),
                            path("ws/stream/<str:station>/", StreamBridge.as_asgi()),
                        ]
                    )
                ),
                allow_missing=("/ws/relay/",),
            )
        ),
    }
)
