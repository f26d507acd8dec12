"""Temporary directories named after the process that owns them, and a sweep of dead owners'.

A Herald killed with SIGKILL runs no clean-up, so its directories (RPC sockets, sandbox files,
the shell's state) would stay for ever. Each is named `herald-<kind>-<pid>-<start>-XXXXXXXX`,
where <start> is the owner's start time in clock ticks since boot: a later process that reuses
the pid has another start time, so a directory whose owner is gone is recognised for certain
and removed when the next Runtime starts.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from .._sandbox.procs import stat_fields

_NAME = re.compile(r"^herald-[a-z]+-(\d+)-(\d+)-[A-Za-z0-9_]+$")
SHM = "/dev/shm"


def start_time(pid: int) -> int | None:
    """A process's start time (ticks since boot; field 22 of /proc/PID/stat), None if gone
    or unknown (no /proc)."""
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])  # the fields after the command name start at field 3 (state)


def _owner_tag() -> str:
    return f"{os.getpid()}-{start_time(os.getpid()) or 0}"


def owned_tempdir(kind: str, dir: str | None = None) -> str:
    """A new private directory `herald-<kind>-<pid>-<start>-XXXXXXXX` (in `dir`, else the
    temp dir), which `sweep_dead_owners` removes once this process is gone."""
    return tempfile.mkdtemp(prefix=f"herald-{kind}-{_owner_tag()}-", dir=dir)


def _owner_alive(pid: int, start: int) -> bool:
    now = start_time(pid)
    if now is not None:
        return now == start or start == 0
    try:  # no /proc (macOS): only whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return not os.path.isdir("/proc/self")


def sweep_dead_owners(dirs: tuple[str, ...] | None = None) -> list[str]:
    """Remove our user's herald-* directories whose owner process has exited; returns them."""
    removed: list[str] = []
    for parent in dirs if dirs is not None else (tempfile.gettempdir(), SHM):
        try:
            entries = os.listdir(parent)
        except OSError:
            continue
        for name in entries:
            match = _NAME.match(name)
            if match is None:
                continue
            path = os.path.join(parent, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            # Only our own plain directories: another user's, or a symlink planted in /tmp, stay.
            if st.st_uid != os.geteuid() or not os.path.isdir(path) or os.path.islink(path):
                continue
            if not _owner_alive(int(match.group(1)), int(match.group(2))):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed
