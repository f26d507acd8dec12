"""Walking a backend's directory tree the way a developer expects a search to.

Hidden entries and the usual bulky, generated directories are skipped, as ripgrep does by
default; the walk is bounded so a search from `/` cannot run away.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from ..backends.base import Backend

SKIP_DIRS = frozenset({"node_modules", "__pycache__", ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".mypy_cache"})


def walk_files(backend: Backend, root: str, *, max_entries: int = 200_000) -> Iterator[str]:
    """Absolute paths of regular files under `root` (or `root` itself if it is a file), sorted."""
    info = backend.stat(root)
    if info is None:
        return
    if not info.is_dir:
        yield root
        return
    seen = 0
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(backend.list_dir(directory), key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        subdirs = []
        for entry in reversed(entries):
            seen += 1
            if seen > max_entries:
                return
            if entry.name.startswith(".") or (entry.is_symlink and entry.is_dir):
                continue
            path = posixpath.join(directory, entry.name)
            if entry.is_dir:
                if entry.name not in SKIP_DIRS:
                    subdirs.append(path)
            elif entry.is_file:
                yield path
        stack.extend(reversed(subdirs))
