"""The error of a sandbox child that could not start, in either mode."""

from __future__ import annotations


class SandboxStartError(RuntimeError):
    """The child interpreter could not start; the message carries its stderr."""
