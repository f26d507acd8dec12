"""The browser's one error type (its message tells the model what to do next), and how to tell
an error that means the browser itself is gone."""

from __future__ import annotations


class BrowserError(Exception):
    def __init__(self, message: str, kind: str = "BrowserError") -> None:
        super().__init__(message)
        self.kind = kind


# Messages of Playwright errors that mean the browser (not just one call) is gone.
DROPPED = (
    "browser has been closed",
    "browser has disconnected",
    "target page, context or browser has been closed",
    "connection closed",
    "target closed",
    "target crashed",
    "websocket error",
    "socket hang up",
)


def looks_dropped(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in DROPPED)
