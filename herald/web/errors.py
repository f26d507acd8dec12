"""What fails one page of a web call: the message goes into that URL's result, not the call's."""

from __future__ import annotations


class PageError(Exception):
    """One URL failed; the message goes into that URL's result."""


class RunTimeUp(PageError):
    """The run's deadline, not the page, ended the fetch."""


class StatusError(PageError):
    """The server answered with an error status (4xx, 5xx)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
