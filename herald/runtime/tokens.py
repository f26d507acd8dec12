"""Run tokens: what a run's token gives the script that presents it.

A token is issued per run (or per kernel session) and revoked when it ends; an RPC connection
that authenticates with it is bound to its `RunToken`, and the Dispatcher serves the
connection's calls with that scope (allow-list, call budget, deadline). A kernel keeps one token
across cells; each cell replaces the scope inside it. (What a run lets be answered next to the
script is another thing: the tool grant, policy/grant.py.)
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .scope import CallScope


@dataclass(eq=False)
class RunToken:
    """What an RPC connection's token is bound to; a kernel's scope changes with each run."""

    scope: CallScope
    # Host mode, when the script's process answers file reads itself: the session directory it
    # was last told (backend_tools.py), so Herald can tell it when that moves.
    cwd_told: str | None = None


class RunTokens:
    """The live grants of one Runtime, by token. `on_revoke(grant)` closes its connections."""

    def __init__(self, on_revoke: Callable[[RunToken], None]) -> None:
        self._on_revoke = on_revoke
        self._lock = threading.Lock()
        self._live: dict[str, RunToken] = {}

    def issue(self, scope: CallScope) -> tuple[str, RunToken]:
        token, grant = secrets.token_urlsafe(24), RunToken(scope)
        with self._lock:
            self._live[token] = grant
        return token, grant

    def lookup(self, token: str) -> RunToken | None:
        """The grant a connection presenting `token` gets; None for unknown or revoked tokens."""
        with self._lock:
            return self._live.get(token)

    def revoke(self, token: str, grant: RunToken) -> None:
        with self._lock:
            self._live.pop(token, None)
        self._on_revoke(grant)

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)
