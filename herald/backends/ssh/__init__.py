"""The SSH backend (paramiko): `ssh://USER@HOST[:PORT]`."""

from .lean import import_paramiko

import_paramiko()  # before any module here imports it (lean.py)

from .backend import SSHBackend  # noqa: E402
from .target import SSHTarget, parse_ssh_spec  # noqa: E402

__all__ = ["SSHBackend", "SSHTarget", "parse_ssh_spec"]
