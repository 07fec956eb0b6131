"""A tiny OAuth2 issuer on loopback: the discovery document and a client-credentials token endpoint, as
Pulsar's clients use them. It records every token request and hands out numbered tokens."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs


@dataclass
class Issuer:
    url: str = ""
    client_id: str = "ledger-deletion"
    client_secret: str = "s3cr3t-client"
    expires_in: float = 3600.0
    requests: list[dict[str, str]] = field(default_factory=list)  # the token requests' forms
    issued: list[str] = field(default_factory=list)


@contextmanager
def issuer(**kwargs: object) -> Iterator[Issuer]:
    state = Issuer(**kwargs)  # type: ignore[arg-type]

    class Handler(BaseHTTPRequestHandler):
        def _json(self, status: int, value: object) -> None:
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path != "/.well-known/openid-configuration":
                self._json(404, {"error": "not_found"})
                return
            self._json(200, {"issuer": state.url, "token_endpoint": f"{state.url}/oauth/token"})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            form = {k: v[0] for k, v in parse_qs(raw).items()}
            state.requests.append(form)
            if (form.get("client_id"), form.get("client_secret")) != (state.client_id, state.client_secret):
                self._json(401, {"error": "invalid_client"})
                return
            token = f"token-{len(state.issued) + 1}"
            state.issued.append(token)
            self._json(200, {"access_token": token, "token_type": "Bearer", "expires_in": state.expires_in})

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
