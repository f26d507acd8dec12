"""The Docker backend: a container per session (see backend.py)."""

from .backend import DockerBackend

__all__ = ["DockerBackend"]
