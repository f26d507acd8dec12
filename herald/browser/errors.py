"""The browser's one error type: its message tells the model what to do next."""

from __future__ import annotations


class BrowserError(Exception):
    def __init__(self, message: str, kind: str = "BrowserError") -> None:
        super().__init__(message)
        self.kind = kind
