"""Where a path leads, symlinks followed, cheaply: for the workspace checks of both sides.

Stdlib only, Python >= 3.8 (the sandbox package). Herald's policy (herald/policy/paths.py)
resolves every local path a file tool is given with these; so do the places that answer a
script's file calls next to it (beside/localtools.py, child/selfserve.py), with the same rule.
"""

from __future__ import annotations

import os


def real_path(path: str) -> str:
    """`os.path.realpath` in three system calls whatever the depth: the kernel follows every
    link when it opens the path (O_PATH: nothing is read, a FIFO does not block) and
    /proc/self/fd says where it ended. A path that does not exist yet (a file to write), a
    dangling link, or no /proc: `os.path.realpath`, component by component."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        target = os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)
    return target if target.startswith("/") else os.path.realpath(path)


class ReadCache:
    """Where paths that are only read lead, remembered with the file they reached, so a repeated
    read costs one `stat`. A hit needs the path to reach, now, the very file (device, inode) its
    resolution reached: the same data, whatever links changed since. A changed path resolves
    again. Writes are never served from here: they replace the file in its directory, so the
    directory's place counts, not the file's identity."""

    LIMIT = 4096

    def __init__(self) -> None:
        self._known: dict[str, tuple[str, int, int]] = {}

    def resolve(self, full: str) -> str:
        try:
            st = os.stat(full)
        except OSError:
            return real_path(full)
        hit = self._known.get(full)
        if hit is not None and hit[1] == st.st_ino and hit[2] == st.st_dev:
            return hit[0]
        resolved = real_path(full)
        try:
            reached = os.stat(resolved)  # the file the resolution found, not the one stat saw before
        except OSError:
            return resolved
        if len(self._known) >= self.LIMIT:
            self._known.clear()
        self._known[full] = (resolved, reached.st_ino, reached.st_dev)
        return resolved
