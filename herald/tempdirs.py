"""Temporary directories on Herald's machine named after this process, swept once it is gone.

A Herald killed with SIGKILL runs no clean-up, so its directories (RPC sockets, sandbox files,
the shell's state) would stay for ever. Each is named `herald-<kind>-<pid>-<start>-XXXXXXXX`
(_sandbox/procs/owners.py, which the backends' setup uses too) and removed when the next Runtime
starts (runtime/selfguard.py) once its owner has exited.
"""

from __future__ import annotations

import os
import tempfile

from ._sandbox.procs.owners import owner_tag, sweep_dead_owners

__all__ = ["owned_tempdir", "sweep", "sweep_dead_owners"]
SHM = "/dev/shm"


def owned_tempdir(kind: str, dir: str | None = None) -> str:
    """A new private directory `herald-<kind>-<pid>-<start>-XXXXXXXX` (in `dir`, else the
    temp dir), which `sweep` removes once this process is gone."""
    return tempfile.mkdtemp(prefix=f"herald-{kind}-{owner_tag(os.getpid())}-", dir=dir)


def sweep() -> list[str]:
    """Remove our user's herald-* directories in the temp dir and /dev/shm whose owner is gone."""
    return sweep_dead_owners((tempfile.gettempdir(), SHM))
