"""`ToolContext`: what a tool's handler may use, the session's backend and settings and what it
keeps for the session (a browser, a page cache), closed with the session."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Settings

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..webguard import WebPolicy


@dataclass
class ToolContext:
    """What a handler may use: the session's backend and settings, and a per-session cache."""

    backend: Backend
    settings: Settings
    cache: dict[str, Any] = field(default_factory=dict)
    cache_lock: threading.Lock = field(default_factory=threading.Lock)
    # What cached session objects (a browser, ...) need done when the session ends; `close` runs them.
    closers: list[Callable[[], None]] = field(default_factory=list)
    # Where web and browser tools may go on each hop they take beyond their checked arguments
    # (redirects, frames, subresources, resolved addresses): the Dispatcher fills it from its
    # policy; None checks nothing (the full profile, or no Dispatcher).
    web_policy: WebPolicy | None = None
    # Set by `close`: a session object made after it (by a warm-up thread, say) would never be
    # closed, so makers check it under `cache_lock` and refuse.
    closed: bool = False

    @property
    def spill_dir(self) -> Path:
        return self.settings.spill_dir

    def close(self) -> None:
        """Run the closers, newest first; one failing does not stop the others."""
        with self.cache_lock:
            self.closed = True
            closers, self.closers = self.closers[::-1], []
        for close in closers:
            try:
                close()
            except Exception:
                logging.getLogger(__name__).exception("closing a session resource failed")
