"""A local OAuth 2.0 authorization server, over real HTTP, for Herald as a resource server.

It serves RFC 8414 metadata (`/.well-known/oauth-authorization-server`), a token endpoint for the
client_credentials grant (clients authenticate with HTTP Basic; the RFC 8707 `resource`
parameter becomes the token's `aud`), and an RFC 7662 introspection endpoint that only the
resource server's own credentials may use. Tokens are opaque and can be revoked.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


@dataclass
class Issued:
    client_id: str
    audience: str | None
    scope: str
    expires: int
    active: bool = True


@dataclass
class FakeIssuer:
    """`clients`: client_id -> secret of the clients that may get tokens; `resource_servers`:
    client_id -> secret of those that may introspect."""

    clients: dict[str, str]
    resource_servers: dict[str, str]
    tokens: dict[str, Issued] = field(default_factory=dict)
    introspections: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def issue(self, client_id: str, audience: str | None, scope: str = "mcp", ttl: int = 3600) -> str:
        token = secrets.token_urlsafe(24)
        self.tokens[token] = Issued(client_id, audience, scope, int(time.time()) + ttl)
        return token

    def revoke(self, token: str) -> None:
        self.tokens[token].active = False

    def start(self) -> FakeIssuer:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _basic(self, known: dict[str, str], form: dict[str, list[str]]) -> str | None:
                header = self.headers.get("Authorization", "")
                if header.startswith("Basic "):
                    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
                else:
                    user, password = form.get("client_id", [""])[0], form.get("client_secret", [""])[0]
                return user if user in known and secrets.compare_digest(known[user], password) else None

            def do_GET(self) -> None:
                if self.path.startswith("/.well-known/oauth-authorization-server"):
                    self._reply(200, {"issuer": issuer.url, "authorization_endpoint": issuer.url + "/authorize",
                                      "token_endpoint": issuer.url + "/token",
                                      "introspection_endpoint": issuer.url + "/introspect",
                                      "grant_types_supported": ["client_credentials"],
                                      "token_endpoint_auth_methods_supported": ["client_secret_basic"]})
                else:
                    self._reply(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                if self.path == "/token":
                    client = self._basic(issuer.clients, form)
                    if client is None:
                        self._reply(401, {"error": "invalid_client"})
                    elif form.get("grant_type") != ["client_credentials"]:
                        self._reply(400, {"error": "unsupported_grant_type"})
                    else:
                        token = issuer.issue(client, form.get("resource", [None])[0],
                                             form.get("scope", ["mcp"])[0])
                        self._reply(200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600,
                                          "scope": issuer.tokens[token].scope})
                elif self.path == "/introspect":
                    if self._basic(issuer.resource_servers, form) is None:
                        self._reply(401, {"error": "invalid_client"})
                        return
                    issuer.introspections += 1
                    found = issuer.tokens.get(form.get("token", [""])[0])
                    if found is None or not found.active or found.expires < time.time():
                        self._reply(200, {"active": False})
                    else:
                        self._reply(200, {"active": True, "client_id": found.client_id, "sub": found.client_id,
                                          "aud": found.audience, "scope": found.scope, "exp": found.expires,
                                          "iss": issuer.url, "token_type": "Bearer"})
                else:
                    self._reply(404, {"error": "not_found"})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
