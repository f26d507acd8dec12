"""The SSH backend (paramiko): `ssh://USER@HOST[:PORT]`."""

from .backend import SSHBackend
from .target import SSHTarget, parse_ssh_spec

__all__ = ["SSHBackend", "SSHTarget", "parse_ssh_spec"]
