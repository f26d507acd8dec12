"""Ignore files read the way ripgrep reads them, so the pure-Python search skips what rg skips.

Stdlib only, Python >= 3.8 (the sandbox package). ripgrep runs with `--no-require-git
--no-ignore-global` (see search/core.py); with those flags its rules, mirrored here, are:

- `.rgignore`, `.ignore` and `.gitignore` in the searched directory, in each directory below it
  and in each one above it, and the repository's `.git/info/exclude`. `.gitignore` files apply
  whether or not there is a `.git` directory (so a copied tree or a fresh `git init` without
  commits search the same); above the nearest directory holding `.git` only `.rgignore` and
  `.ignore` apply. The user's global git excludes file is not read.
- A path is matched as itself (search/gitignore.py), never through its parent directories: an ignored
  directory is simply not entered, and a search started inside one (`path="build"`) searches
  it, as ripgrep does with a path it is given.
- Within one file the last matching line wins; then the deepest file with a matching line wins;
  `.rgignore` beats `.ignore`, which beats `.gitignore`, which beats `info/exclude`.
"""

from __future__ import annotations

import posixpath
from typing import Any, Dict, Iterable, List, Optional, Protocol, Tuple

from .gitignore import Rule, parse_lines

IGNORE_FILES = (".rgignore", ".ignore", ".gitignore")  # in ripgrep's order of precedence
GIT_KINDS = (2, 3)  # indexes of .gitignore and info/exclude in IgnoreDir.rules

Rules = Tuple[Rule, ...]  # one file's rules, last line first


class Entry(Protocol):
    """A directory entry: the Backend protocol's DirEntry, or walk.OsEntry."""

    name: str
    is_dir: bool
    is_file: bool
    is_symlink: bool


class Tree(Protocol):
    """What a search needs of a file system: a Backend, or walk.OsTree (absolute paths)."""

    def stat(self, path: str) -> Any: ...

    def list_dir(self, path: str) -> Any: ...

    def read_bytes(self, path: str, max_bytes: Optional[int] = None) -> bytes: ...


def parse(text: str) -> Rules:
    """One ignore file's rules, last line first."""
    return tuple(reversed(parse_lines(text)))


def _decide(rules: Rules, relative: str, is_dir: bool) -> Optional[bool]:
    """True: ignored; False: re-included by a `!` line; None: no line matches."""
    for rule in rules:
        if rule.matches(relative, is_dir):
            return not rule.negated
    return None


class IgnoreDir:
    """The ignore files of one directory that has any (or holds `.git`), linked to those above."""

    __slots__ = ("has_git", "parent", "path", "rules")

    def __init__(self, path: str, parent: Optional[IgnoreDir], rules: List[Optional[Rules]], has_git: bool) -> None:
        self.path = path
        self.parent = parent
        self.rules = rules  # IGNORE_FILES + info/exclude
        self.has_git = has_git

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Is `path` (absolute, below this directory) ignored?"""
        decided: List[Optional[bool]] = [None, None, None, None]
        in_repository = True  # .gitignore and info/exclude stop at the repository root
        node: Optional[IgnoreDir] = self
        while node is not None:
            relative = path[len(node.path.rstrip("/")) + 1 :]
            for kind, rules in enumerate(node.rules):
                if rules and decided[kind] is None and (in_repository or kind not in GIT_KINDS):
                    decided[kind] = _decide(rules, relative, is_dir)
            in_repository = in_repository and not node.has_git
            node = node.parent
        return next((d for d in decided if d is not None), False)


def descend(parent: Optional[IgnoreDir], tree: Tree, directory: str, entries: Iterable[Entry]) -> Optional[IgnoreDir]:
    """The rules in force inside `directory`, given its listing."""
    by_name = {e.name: e for e in entries}
    found: List[Optional[Rules]] = [_read(tree, directory, name) if name in by_name else None for name in IGNORE_FILES]
    git = by_name.get(".git")
    found.append(_read(tree, directory, ".git/info/exclude") if git is not None and git.is_dir else None)
    if not any(found) and git is None:
        return parent
    return IgnoreDir(directory, parent, found, git is not None)


def rules_above(tree: Tree, root: str) -> Optional[IgnoreDir]:
    """The rules that `root`'s ancestors (`/` first) impose on what is below `root`."""
    rules: Optional[IgnoreDir] = None
    ancestors: List[str] = []
    directory = root
    while directory != "/":
        directory = posixpath.dirname(directory)
        ancestors.append(directory)
    for directory in reversed(ancestors):
        try:
            entries = tree.list_dir(directory)
        except OSError:
            continue  # unreadable: as if it had no ignore files
        rules = descend(rules, tree, directory, entries)
    return rules


def _read(tree: Tree, directory: str, name: str) -> Optional[Rules]:
    try:
        data = tree.read_bytes(posixpath.join(directory, name))
    except OSError:
        return None
    return parse(data.decode("utf-8", "replace")) or None


class Reach:
    """Would a walk honouring ignore files, started at `base`, reach a given file below it?

    For results ripgrep found with a `--glob`, which overrides ignore files for what it
    matches: each directory on the way is looked at once (its listing, its ignore files).
    Hidden entries and SKIP_DIRS are not checked here: ripgrep's own overrides drop them.
    """

    def __init__(self, tree: Tree, base: str) -> None:
        self._tree = tree
        self._base = base.rstrip("/") or "/"
        self._dirs: Dict[str, Tuple[bool, Optional[IgnoreDir]]] = {}

    def file(self, relative: str) -> bool:
        directory = posixpath.dirname(relative)
        entered, rules = self._dir(directory)
        return entered and not (rules is not None and rules.ignored(posixpath.join(self._base, relative), False))

    def _dir(self, relative: str) -> Tuple[bool, Optional[IgnoreDir]]:
        """Whether the walk enters `relative` (a directory below base, "" for base), and the
        rules in force inside it."""
        if relative in self._dirs:
            return self._dirs[relative]
        path = posixpath.join(self._base, relative) if relative else self._base
        if relative:
            entered, rules = self._dir(posixpath.dirname(relative))
            entered = entered and not (rules is not None and rules.ignored(path, True))
        else:
            entered, rules = True, rules_above(self._tree, self._base)
        if entered:
            try:
                entries = self._tree.list_dir(path)
            except OSError:
                entries = []
            rules = descend(rules, self._tree, path, entries)
        self._dirs[relative] = (entered, rules)
        return entered, rules
