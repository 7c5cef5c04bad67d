"""ASGI entry point: HTTP (panel, API; Host checked against ALLOWED_HOSTS by Django) and
the relay's WebSocket routes (Origin checked by `elections.web.origin.OriginCheck`)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stkrelay.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from elections.web.origin import OriginCheck  # noqa: E402
from relay.ws import RelayBridge, StreamBridge  # noqa: E402
from relay.ws_flow import WriteBuffer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # A browser's Origin must be one of ALLOWED_HOSTS; only /ws/relay/ (relay-token
        # handshake, no cookie) takes non-browser clients without one (elections/web/origin.py).
        # Outermost: what the server holds for each connection, read by the bridges' bound
        # (relay/ws_flow.py) before any middleware wraps send and receive.
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
