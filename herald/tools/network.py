"""Where the web and browser tools connect from: this machine, or the backend (`browser.network`).

A remote backend's programs see its own network: an app started there on 127.0.0.1 is reached
only from there. With `browser.network = "backend"` (the default) the session's browser and
web_extract's fetches connect through the backend's `open_tcp` (an SSH tunnel, a relay in the
container), names resolved there and each address checked by the session's policy; "local"
connects from this machine. The local backend's network is this machine's either way.
"""

from __future__ import annotations

from ..webguard import Dial, checked_dial
from .registry import ToolContext


def backend_dial(ctx: ToolContext) -> Dial | None:
    """The dial through the session's backend, or None to connect from here."""
    if ctx.settings.browser.network == "local" or ctx.backend.name == "local":
        return None
    return checked_dial(ctx.web_policy, ctx.backend.open_tcp)
