"""Where commands run and files live: one protocol, several backends."""

from .base import Backend, BackendError, CommandResult, DirEntry, FileStat

__all__ = ["Backend", "BackendError", "CommandResult", "DirEntry", "FileStat"]
