"""Where the web and browser tools connect from: this machine, or the backend (`browser.network`).

A remote backend's programs see its own network: an app started there on 127.0.0.1 is reached
only from there. With `browser.network = "backend"` (the default) the session's browser and
web_extract's fetches connect through the backend's `open_tcp` (an SSH tunnel, a relay in the
container), names resolved there and each address checked by the session's policy; "local"
connects from this machine. The local backend's network is this machine's either way.
"""

from __future__ import annotations

from ..webguard import Dial, OpenTcp, checked_dial
from .context import ToolContext


def backend_open_tcp(ctx: ToolContext) -> OpenTcp | None:
    """The backend's `open_tcp` when connections leave from the backend, or None: from here."""
    if ctx.settings.browser.network == "local" or ctx.backend.name == "local":
        return None
    return ctx.backend.open_tcp


def backend_dial(ctx: ToolContext) -> Dial | None:
    """The dial through the session's backend, each address checked by the session's policy, or
    None to connect from here."""
    open_tcp = backend_open_tcp(ctx)
    return None if open_tcp is None else checked_dial(ctx.web_policy, open_tcp)
