"""The one error a bad setting raises, wherever it came from (file, environment, flag)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is unknown or has a value of the wrong type; the message says which and where."""
