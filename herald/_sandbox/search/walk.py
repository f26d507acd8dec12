"""Walking a directory tree the way a developer expects a search to.

Stdlib only, Python >= 3.8 (the sandbox package): Herald walks a session's Backend with it, and
a backend-mode supervisor walks its own file system (`OsTree`) with the same code.

Hidden entries and the usual bulky, generated directories are skipped, and (when asked) what
.gitignore and ripgrep's other ignore files exclude, as ripgrep does; the walk is bounded so a
search from `/` cannot run away.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any, Iterator, List, NamedTuple, Optional, Tuple

from ..toolcore.callroots import Confinement
from ..toolcore.fileaccess import OsFiles, open_dir
from .ignorefiles import IgnoreDir, Tree, descend, rules_above

SKIP_DIRS = frozenset({"node_modules", "__pycache__", ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".mypy_cache"})


class OsEntry(NamedTuple):
    """A directory entry as the Backend protocol's DirEntry describes one."""

    name: str
    is_dir: bool
    is_file: bool
    is_symlink: bool = False


class OsTree(OsFiles):
    """OsFiles that can list directories too: what a search walks inside a backend."""

    def list_dir(self, path: str) -> List[OsEntry]:
        return [OsEntry(*fields) for fields in scan_dir(path, self.confinement)]


def scan_dir(path: str, confinement: Optional[Confinement] = None) -> List[Tuple[str, bool, bool, bool]]:
    """(name, is_dir, is_file, is_symlink) of each entry of `path`: how Herald's local backend
    and a backend's supervisor list a directory alike. An entry whose type cannot be told is
    neither a directory nor a file. Under a confinement the directory is opened once and listed
    through that descriptor, once its place passed the check (Refused otherwise)."""
    if confinement is None:
        return _entries(path)
    fd, _ = open_dir(path, confinement)
    try:
        return _entries(fd)
    finally:
        os.close(fd)


def _entries(where: Any) -> List[Tuple[str, bool, bool, bool]]:
    entries = []
    with os.scandir(where) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir()
                is_file = entry.is_file()
            except OSError:
                is_dir = is_file = False
            entries.append((entry.name, is_dir, is_file, entry.is_symlink()))
    return entries


def walk_files(tree: Tree, root: str, *, ignore_files: bool = False, max_entries: int = 200_000) -> Iterator[str]:
    """Absolute paths of regular files under `root` (or `root` itself if it is a file).

    The order is ripgrep's `--sort=path`: depth first, each directory's entries by name, files
    and subdirectories interleaved. Symlinks are not followed (ripgrep's default either).
    `ignore_files` also skips what ignore files exclude (see search/ignorefiles.py); `root` itself is
    always walked, as ripgrep walks a path it is given.
    """
    info = tree.stat(root)
    if info is None:
        return
    if not info.is_dir:
        yield root
        return
    seen = 0
    # One frame per directory being listed: its entries, its path and the ignore rules in
    # force inside it. Entries are consumed one at a time so files and subdirectories come
    # out in one name order (a/x before a.txt, as ripgrep sorts).
    stack: List[Tuple[Iterator[Any], str, Optional[IgnoreDir]]] = []

    def enter(directory: str, rules: Optional[IgnoreDir]) -> None:
        try:
            entries = tree.list_dir(directory)
        except OSError:
            entries = []
        if ignore_files:
            rules = descend(rules, tree, directory, entries)
        stack.append((iter(sorted(entries, key=lambda e: e.name)), directory, rules))

    enter(root, rules_above(tree, root) if ignore_files else None)
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
