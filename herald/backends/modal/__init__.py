"""The Modal backend: a Modal sandbox per session (see backend.py)."""

from .backend import ModalBackend

__all__ = ["ModalBackend"]
