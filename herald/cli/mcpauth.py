"""Who may use `herald mcp serve --http`: bearer tokens from a file, or OAuth tokens of an issuer.

Tokens (`serve.auth = "token"`, the default): `name:token` lines in a file only its owner may
read or write (`--token-file`, else `data_dir/mcp/tokens`, generated on first use with one token,
`default`, printed once). The name is the client's identity: its kernel sessions, limits and
transcript records are keyed by it. A token is compared with every known one in constant time.

OAuth (`serve.auth = "oauth"`): Herald is a resource server; each token is checked at the
issuer's RFC 7662 introspection endpoint, must be active and issued for this server (its `aud`),
and the identity is `oauth:` + its subject. Clients learn the issuer from the protected-resource
metadata the SDK serves at /.well-known/oauth-protected-resource.

Both go through the SDK's auth support (a TokenVerifier, AuthSettings): a request without a
valid token is answered 401 with a `WWW-Authenticate: Bearer` header, and an MCP session can
only be used with the credential that opened it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import UsageError

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken, TokenVerifier
    from mcp.server.auth.settings import AuthSettings

    from ..config import Settings

log = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
INTROSPECTION_TIMEOUT = 10.0  # seconds for the issuer to answer one introspection


@dataclass(frozen=True)
class AuthSetup:
    """What `streamable_http_app` needs (both None: no authentication) and what to say at start."""

    verifier: TokenVerifier | None
    settings: AuthSettings | None
    describe: str


def is_loopback(host: str) -> bool:
    """A bind the SDK guards against DNS rebinding (it checks Host and Origin for these names
    only), so a web page cannot reach an unauthenticated server through the user's browser."""
    return host in LOOPBACK


def auth_setup(settings: Settings, host: str, port: int, *, no_auth: bool, token_file: str | None) -> AuthSetup:
    """The authentication of an HTTP server at HOST:PORT, or a UsageError saying how to fix the setup."""
    mode = "none" if no_auth else settings.serve.auth
    if mode == "none":
        if not is_loopback(host):
            raise UsageError(f"--http {host}:{port} without authentication would let anyone who can reach it run "
                             "code as you: serve it with bearer tokens (the default: drop --no-auth / serve.auth "
                             "= \"none\"), or with serve.auth = \"oauth\", or bind 127.0.0.1, localhost or ::1")
        return AuthSetup(None, None, "authentication is OFF (--no-auth): any local process or user that can reach "
                                    "this port runs code as you")
    from mcp.server.auth.settings import AuthSettings

    if mode == "oauth":
        serve = settings.serve
        if token_file:
            raise UsageError("--token-file is for serve.auth = \"token\"; with \"oauth\" the issuer's tokens are used")
        if not serve.oauth_issuer or not serve.oauth_introspection_url:
            raise UsageError("serve.auth = \"oauth\" needs serve.oauth_issuer (the authorization server's URL) and "
                             "serve.oauth_introspection_url (its token introspection endpoint)")
        resource = serve.oauth_resource or f"http://{_url_host(host)}:{port}/mcp"
        verifier = IntrospectedTokens(serve.oauth_introspection_url, resource,
                                      client_id=serve.oauth_client_id, client_secret=serve.oauth_client_secret)
        auth = AuthSettings(issuer_url=serve.oauth_issuer, resource_server_url=resource,  # type: ignore[arg-type]
                            required_scopes=list(serve.oauth_scopes) or None, validate_token_resource=True)
        return AuthSetup(verifier, auth, f"OAuth tokens of {serve.oauth_issuer} for {resource}, checked at "
                                         f"{serve.oauth_introspection_url}")
    path = Path(token_file or settings.serve.token_file or settings.data_dir / "mcp" / "tokens").expanduser()
    created = None
    if not token_file and not settings.serve.token_file and not path.exists():
        created = create_token_file(path)
    tokens = read_token_file(path)
    describe = f"bearer tokens from {path} ({', '.join(sorted(tokens))})"
    if created is not None:
        describe += (f"\nherald: created the token 'default' (printed this once; it is kept in {path}):\n"
                     f"  Authorization: Bearer {created}")
    # The issuer is never contacted nor advertised (no resource_server_url): tokens are Herald's own.
    auth = AuthSettings(issuer_url=f"http://{_url_host(host)}:{port}",  # type: ignore[arg-type]
                        resource_server_url=None)
    return AuthSetup(StaticTokens(tokens), auth, describe)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def create_token_file(path: Path) -> str:
    """A new token file with one token, `default`, that only this user may read: the token."""
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("# herald mcp serve: one client a line, NAME:TOKEN (the name is the client's identity)\n"
                  f"default:{token}\n")
    return token


def read_token_file(path: Path) -> dict[str, str]:
    """NAME -> TOKEN from `path`, which must be this user's and readable by no one else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise UsageError(f"token file {path}: {exc.strerror or exc}; write NAME:TOKEN lines to it "
                         "(e.g. from: python3 -c 'import secrets; print(secrets.token_urlsafe(32))')") from None
    with os.fdopen(fd, encoding="utf-8") as file:  # checked and read through the same descriptor
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"token file {path} is not a regular file")
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise UsageError(f"token file {path} can be read or changed by other users "
                             f"(mode {stat.S_IMODE(info.st_mode):o}, owner uid {info.st_uid}): "
                             f"run chmod 600 {path} (and chown it to yourself)")
        lines = file.read().splitlines()
    tokens: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, token = line.partition(":")
        name, token = name.strip(), token.strip()
        if not sep or not TOKEN_NAME.fullmatch(name) or len(token) < 16:
            raise UsageError(f"token file {path}, line {number}: expected NAME:TOKEN, the name letters, digits "
                             "and _.@- (at most 64), the token at least 16 characters")
        if name in tokens:
            raise UsageError(f"token file {path}, line {number}: the name {name!r} is used twice")
        tokens[name] = token
    if not tokens:
        raise UsageError(f"token file {path} has no NAME:TOKEN line")
    return tokens


class StaticTokens:
    """The SDK's TokenVerifier for Herald's own tokens: the name of the one that matches."""

    def __init__(self, tokens: dict[str, str]) -> None:
        # Digests: compare_digest then compares equal lengths, and every token is compared.
        self._known = [(name, hashlib.sha256(token.encode()).digest()) for name, token in tokens.items()]

    async def verify_token(self, token: str) -> AccessToken | None:
        from mcp.server.auth.provider import AccessToken

        offered = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found = None
        for name, digest in self._known:  # no early exit: the time does not say which token matched
            if hmac.compare_digest(offered, digest):
                found = name
        if found is None:
            return None
        return AccessToken(token=token, client_id=found, scopes=[])


class IntrospectedTokens:
    """The SDK's TokenVerifier for an OAuth issuer's tokens, asked at its introspection endpoint
    (RFC 7662): active, and issued for `resource` (the SDK compares `AccessToken.resource`)."""

    def __init__(self, url: str, resource: str, *, client_id: str = "", client_secret: str = "") -> None:
        self.url, self.resource = url, resource
        self._auth = (client_id, client_secret) if client_id else None
        self._http: Any = None  # one httpx.AsyncClient, made on the server's event loop

    async def verify_token(self, token: str) -> AccessToken | None:
        import httpx
        from mcp.server.auth.provider import AccessToken

        if self._http is None:
            self._http = httpx.AsyncClient(timeout=INTROSPECTION_TIMEOUT)
        try:
            reply = await self._http.post(self.url, data={"token": token}, auth=self._auth)
            data = reply.json() if reply.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("token introspection at %s failed: %s", self.url, exc)
            return None
        if not isinstance(data, dict) or data.get("active") is not True:
            return None
        audiences = data.get("aud")
        audiences = [audiences] if isinstance(audiences, str) else [a for a in audiences or [] if isinstance(a, str)]
        resource = next((a for a in audiences if a.rstrip("/") == self.resource.rstrip("/")),
                        audiences[0] if audiences else None)
        subject = data.get("sub") if isinstance(data.get("sub"), str) else None
        client = data.get("client_id") if isinstance(data.get("client_id"), str) else None
        if not subject and not client:
            return None
        scope = data.get("scope")
        expires = data.get("exp")
        return AccessToken(token=token, client_id=f"oauth:{subject or client}",
                           scopes=scope.split() if isinstance(scope, str) else [],
                           expires_at=int(expires) if isinstance(expires, int | float) else None,
                           resource=resource, subject=subject,
                           claims={"iss": data["iss"]} if isinstance(data.get("iss"), str) else None)


def identity_of(request: Any) -> str | None:
    """The authenticated identity of an HTTP request (the token's name, `oauth:SUBJECT`), or None."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser

    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    return user.access_token.client_id if isinstance(user, AuthenticatedUser) else None
