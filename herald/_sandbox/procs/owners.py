"""Directories named after the process whose life they share, and the sweep of dead owners'.

A process that ends without its clean-up (SIGKILL, a host unreachable when its session
closed) leaves its temporary directories behind: RPC sockets, sandbox files. Each such
directory is named `herald-<kind>-<pid>-<start>-XXXXXXXX`, where <start> is the owner's start
time in clock ticks since boot (field 22 of /proc/PID/stat): a later process that reuses the
pid has another start time, so a directory whose owner is gone is recognised for certain and
removed by the next sweep.

The owner is the process whose end means nobody can use the directory any more:
- on Herald's machine (host mode, the local backend), Herald's own process;
- in a backend reached over SSH, the sshd process that serves the connection (`connection_owner`):
  the Runtime that made the directory may reconnect later, and then prepares a new one if this
  one was swept meanwhile (runtime/sandbox/backend/sandbox.py).
Where neither is known (a container's exec has no such ancestor) the directory carries no
owner and is never swept; the container goes with its files.

Self-contained (no imports of the package), stdlib only, Python >= 3.8: the backend's setup
runs this file's text from the archive it has just received, before the files are on disk.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from typing import Iterable, List, Optional

NAME = re.compile(r"^herald-([a-z]+)-(\d+)-(\d+)-[A-Za-z0-9_]+$")
SUFFIX_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
ANCESTORS_WALKED = 64  # a loop in the parent links (a pid reused meanwhile) ends here


def stat_fields(pid: int) -> Optional[List[bytes]]:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...); None if gone."""
    try:  # os.open/read, not open(): no buffered file object (a third of the time; walks read many)
        fd = os.open("/proc/%d/stat" % pid, os.O_RDONLY)
        try:
            line = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    # The command name may hold spaces or parentheses: fields resume after the last ')'.
    return line[line.rfind(b")") + 2 :].split()


def start_time(pid: int) -> Optional[int]:
    """A process's start time (ticks since boot), None if gone or unknown (no /proc)."""
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])  # the fields after the command name start at field 3 (state)


def owner_tag(pid: int) -> str:
    """`<pid>-<start>` of a live process, as directory names carry it."""
    return "%d-%d" % (pid, start_time(pid) or 0)


def connection_owner() -> Optional[str]:
    """The tag of the sshd process this one descends from (the SSH connection's), or None."""
    pid = os.getppid()
    for _ in range(ANCESTORS_WALKED):
        if pid <= 1:
            return None
        try:
            with open("/proc/%d/comm" % pid, "rb") as f:
                name = f.read().strip()
        except OSError:
            return None
        if name.startswith(b"sshd"):  # sshd, or sshd-session since OpenSSH 9.8
            return owner_tag(pid)
        fields = stat_fields(pid)
        if fields is None or len(fields) < 2:
            return None
        pid = int(fields[1])
    return None


def make_owned_dir(parent: str, kind: str, owner: Optional[str]) -> str:
    """A new private (0700) directory in `parent`, named after `owner` (a tag) when there is one."""
    prefix = "herald-%s-%s-" % (kind, owner) if owner else "herald-%s-" % kind
    for _ in range(100):
        suffix = "".join(SUFFIX_CHARS[b % len(SUFFIX_CHARS)] for b in os.urandom(8))
        path = os.path.join(parent, prefix + suffix)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError("no free directory name in %s" % parent)


def owner_alive(pid: int, start: int) -> bool:
    fields = stat_fields(pid)
    if fields is not None and len(fields) >= 20:
        if fields[0] == b"Z":  # exited, not yet reaped by its parent
            return False
        return int(fields[19]) == start or start == 0
    try:  # no /proc (macOS): only whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return not os.path.isdir("/proc/self")


def sweep_dead_owners(parents: Iterable[str], kind: Optional[str] = None) -> List[str]:
    """Remove our user's owned directories (of `kind`, else any) in `parents` whose owner has
    exited; the paths removed."""
    removed: List[str] = []
    for parent in parents:
        try:
            entries = os.listdir(parent)
        except OSError:
            continue
        for name in entries:
            match = NAME.match(name)
            if match is None or (kind is not None and match.group(1) != kind):
                continue
            path = os.path.join(parent, name)
            if not _ours(path):
                continue
            if not owner_alive(int(match.group(2)), int(match.group(3))):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def _ours(path: str) -> bool:
    """Only our own plain directories: another user's, or a symlink planted in /tmp, stay."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode)
