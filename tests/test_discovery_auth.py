"""The HTTP leader lookup sends the panel API token when it has one."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from relay.client.discovery import AgentApi


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Authorization") != "Bearer stk_secret":
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps({"kmsn": "K1", "leader": "S002", "station": "S002", "ip": "127.0.0.22",
                           "port": 9530, "epoch": 4, "status": "valid"}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_it_sends_the_api_token_and_reports_a_refusal_without_it():
    server = ThreadingHTTPServer(("127.0.0.52", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.52:{server.server_address[1]}"
    try:
        found = asyncio.run(AgentApi([url], "K1", api_token="stk_secret").find())
        assert found is not None and (found.ip, found.port, found.epoch) == ("127.0.0.22", 9530, 4)
        anonymous = AgentApi([url], "K1")
        assert asyncio.run(anonymous.find()) is None
        assert "HTTP 401" in anonymous.last
    finally:
        server.shutdown()
