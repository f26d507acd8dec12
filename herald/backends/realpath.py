"""Where a path on a remote backend leads, every symlink followed, for the workspace check.

A remote backend offers two primitives: the server's own resolution of a path (SFTP REALPATH,
`readlink -f` in a shell), which fails when the path cannot be followed to the end (a missing
directory on the way, a dangling link whose target's directory is missing), and reading one
link. The first answers the common case in one request; `resolve_links` falls back to the
second, component by component, only where the first failed, so that a path a write would
create (its missing directories made on the way) or a dangling link a write would follow
resolves to where the write would land. Such a path never reaches anything that exists outside
what its existing part resolved to, except through a link, and links are followed here.

Paths are absolute and lexically normalised first (`..` collapsed) because every backend opens
them that way (`resolve_path`); `..` inside a link's target is followed physically, as the
kernel does.
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Callable

MAX_LINKS = 40  # as the kernel's ELOOP limit


def resolve_links(path: str, realpath: Callable[[str], str | None], readlink: Callable[[str], str | None]) -> str:
    """Where the absolute, normalised `path` leads. `realpath(p)`: the server's resolution, or
    None when it could not resolve `p`; `readlink(p)`: the link at `p`, None when `p` is not a
    link. OSError(ELOOP) after MAX_LINKS links."""
    budget = [MAX_LINKS]

    def resolve(p: str) -> str:
        found = realpath(p)
        if found is not None:
            return found
        if p == "/":
            return p
        parent, name = resolve(posixpath.dirname(p)), posixpath.basename(p)
        if name in ("", ".", ".."):  # from a link's target ("a/../b"): after a link, physically
            return posixpath.dirname(parent) if name == ".." else parent
        here = posixpath.join(parent, name)
        link = readlink(here)
        if link is None:
            return here  # missing: a write would create it right here
        budget[0] -= 1
        if budget[0] < 0:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        # Not normalised: a `..` after a link in the target goes where that link leads.
        return resolve(posixpath.join(parent, link))

    return resolve(path)


def moved(path: str, now: str, pinned: str) -> PermissionError:
    """The error for a pinned path that leads elsewhere now: a link changed between the
    workspace check and the operation."""
    return PermissionError(
        errno.EACCES,
        f"{path} now leads to {now}, not to {pinned} where it led when this call was checked (a link "
        "changed in between); nothing was read or written. Make the call again to have it checked anew",
        path,
    )


class Pins:
    """Where the workspace check last allowed each path to lead (a backend's `pin`): a later
    read or write of the path checks, as part of the operation, that it still leads there (a
    link swapped between the check and the operation is caught). Only allowed resolutions are
    pinned, so whatever passes the operation's check leads inside. Not thread-safe: the
    backend's lock.

    Kept until `LIMIT` paths are pinned, then the older half is dropped: a check and its
    operation follow each other within one tool call, far fewer than LIMIT resolutions apart."""

    LIMIT = 65536

    def __init__(self) -> None:
        self._where: dict[str, str] = {}

    def pin(self, path: str, resolved: str) -> None:
        self._where.pop(path, None)  # re-inserted last: the most recent survive a trim
        self._where[path] = resolved
        if len(self._where) > self.LIMIT:
            for old in list(self._where)[: self.LIMIT // 2]:
                del self._where[old]

    def get(self, path: str) -> str | None:
        return self._where.get(path)
