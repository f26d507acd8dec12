"""Walking a backend's directory tree the way a developer expects a search to.

Hidden entries and the usual bulky, generated directories are skipped, as ripgrep does by
default; the walk is bounded so a search from `/` cannot run away.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from ..backends.base import Backend, DirEntry

SKIP_DIRS = frozenset({"node_modules", "__pycache__", ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".mypy_cache"})


def walk_files(backend: Backend, root: str, *, max_entries: int = 200_000) -> Iterator[str]:
    """Absolute paths of regular files under `root` (or `root` itself if it is a file).

    The order is ripgrep's `--sort=path`: depth first, each directory's entries by name, files
    and subdirectories interleaved. Symlinks are not followed (ripgrep's default either).
    """
    info = backend.stat(root)
    if info is None:
        return
    if not info.is_dir:
        yield root
        return
    seen = 0
    # A stack of iterators, one per directory being listed, so files and subdirectories come
    # out in one name order (a/x before a.txt, as ripgrep sorts).
    stack: list[Iterator[DirEntry]] = []
    directories = [root]

    def listing(directory: str) -> Iterator[DirEntry]:
        try:
            entries = backend.list_dir(directory)
        except OSError:
            return iter(())
        return iter(sorted(entries, key=lambda e: e.name))

    stack.append(listing(root))
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            directories.pop()
            continue
        seen += 1
        if seen > max_entries:
            return
        if entry.name.startswith(".") or entry.is_symlink:
            continue
        path = posixpath.join(directories[-1], entry.name)
        if entry.is_dir:
            if entry.name not in SKIP_DIRS:
                directories.append(path)
                stack.append(listing(path))
        elif entry.is_file:
            yield path
