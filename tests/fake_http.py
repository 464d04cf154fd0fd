"""A quiet JSON reply handler for the misbehaving llama-server stand-ins the tests run on
127.0.0.1 (each test's handler decides what to reply; this only sends it)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # quiet: the test reads the backend's errors
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
