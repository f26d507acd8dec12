"""Walking a backend's directory tree the way a developer expects a search to.

Hidden entries and the usual bulky, generated directories are skipped, and (when asked) what
.gitignore and ripgrep's other ignore files exclude, as ripgrep does; the walk is bounded so a
search from `/` cannot run away.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from ..backends.base import Backend, DirEntry
from .ignore import IgnoreDir, descend, rules_above

SKIP_DIRS = frozenset({"node_modules", "__pycache__", ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".mypy_cache"})


def walk_files(backend: Backend, root: str, *, ignore_files: bool = False, max_entries: int = 200_000) -> Iterator[str]:
    """Absolute paths of regular files under `root` (or `root` itself if it is a file).

    The order is ripgrep's `--sort=path`: depth first, each directory's entries by name, files
    and subdirectories interleaved. Symlinks are not followed (ripgrep's default either).
    `ignore_files` also skips what ignore files exclude (see ignore.py); `root` itself is
    always walked, as ripgrep walks a path it is given.
    """
    info = backend.stat(root)
    if info is None:
        return
    if not info.is_dir:
        yield root
        return
    seen = 0
    # One frame per directory being listed: its entries, its path and the ignore rules in
    # force inside it. Entries are consumed one at a time so files and subdirectories come
    # out in one name order (a/x before a.txt, as ripgrep sorts).
    stack: list[tuple[Iterator[DirEntry], str, IgnoreDir | None]] = []

    def enter(directory: str, rules: IgnoreDir | None) -> None:
        try:
            entries = backend.list_dir(directory)
        except OSError:
            entries = []
        if ignore_files:
            rules = descend(rules, backend, directory, entries)
        stack.append((iter(sorted(entries, key=lambda e: e.name)), directory, rules))

    enter(root, rules_above(backend, root) if ignore_files else None)
    while stack:
        entries, directory, rules = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        seen += 1
        if seen > max_entries:
            return
        if entry.name.startswith(".") or entry.is_symlink:
            continue
        if entry.is_dir and entry.name in SKIP_DIRS:
            continue
        path = posixpath.join(directory, entry.name)
        if rules is not None and rules.ignored(path, entry.is_dir):
            continue
        if entry.is_dir:
            enter(path, rules)
        elif entry.is_file:
            yield path
