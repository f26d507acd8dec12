"""Ignore files read the way ripgrep reads them, so the pure-Python search skips what rg skips.

ripgrep runs with `--no-require-git --no-ignore-global` (see search.py); with those flags its
rules, mirrored here, are:

- `.rgignore`, `.ignore` and `.gitignore` in the searched directory, in each directory below it
  and in each one above it, and the repository's `.git/info/exclude`. `.gitignore` files apply
  whether or not there is a `.git` directory (so a copied tree or a fresh `git init` without
  commits search the same); above the nearest directory holding `.git` only `.rgignore` and
  `.ignore` apply. The user's global git excludes file is not read.
- A path is matched as itself (a directory with a trailing `/`), never through its parent
  directories: an ignored directory is simply not entered, and a search started inside one
  (`path="build"`) searches it, as ripgrep does with a path it is given.
- Within one file the last matching line wins; then the deepest file with a matching line wins;
  `.rgignore` beats `.ignore`, which beats `.gitignore`, which beats `info/exclude`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from pathspec import GitIgnoreSpec
from pathspec.pattern import Pattern

from ..backends.base import Backend, DirEntry

IGNORE_FILES = (".rgignore", ".ignore", ".gitignore")  # in ripgrep's order of precedence
GIT_KINDS = (2, 3)  # indexes of .gitignore and info/exclude in IgnoreDir.rules

Rules = tuple[Pattern, ...]  # one file's patterns, last line first


def parse(text: str) -> Rules:
    """One ignore file's patterns. A line pathspec cannot parse is skipped, as ripgrep skips it."""
    # ripgrep reads a lone "!" as re-including everything (pathspec rejects it).
    lines = ["!**" if line.rstrip(" ") == "!" else line for line in text.splitlines()]
    try:
        patterns = list(GitIgnoreSpec.from_lines(lines).patterns)
    except (ValueError, re.error):  # some line is malformed ("[z-a]"): keep the others
        patterns = []
        for line in lines:
            try:
                patterns += GitIgnoreSpec.from_lines([line]).patterns
            except (ValueError, re.error):
                continue
    return tuple(reversed([p for p in patterns if p.include is not None]))


def _decide(rules: Rules, relative: str) -> bool | None:
    """True: ignored; False: re-included by a `!` line; None: no line matches."""
    for pattern in rules:
        result = pattern.match_file(relative)
        if result is not None and _matches_itself(result.match, relative):
            return bool(pattern.include)
    return None


def _matches_itself(match: re.Match[str], relative: str) -> bool:
    # pathspec also matches everything under a matching directory (`build/` matches
    # "build/x.py"), marking that with its "ps_d" group ending inside the path.
    # ripgrep matches each path only as itself; an end at the path's end is the directory itself.
    if "ps_d" not in match.re.groupindex:
        return True
    end = match.end("ps_d")
    return end == -1 or end == len(relative)


@dataclass(frozen=True)
class IgnoreDir:
    """The ignore files of one directory that has any (or holds `.git`), linked to those above."""

    path: str
    parent: IgnoreDir | None
    rules: tuple[Rules | None, Rules | None, Rules | None, Rules | None]  # IGNORE_FILES + exclude
    has_git: bool

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Is `path` (absolute, below this directory) ignored?"""
        decided: list[bool | None] = [None, None, None, None]
        in_repository = True  # .gitignore and info/exclude stop at the repository root
        node: IgnoreDir | None = self
        while node is not None:
            relative = path[len(node.path.rstrip("/")) + 1 :] + ("/" if is_dir else "")
            for kind, rules in enumerate(node.rules):
                if rules and decided[kind] is None and (in_repository or kind not in GIT_KINDS):
                    decided[kind] = _decide(rules, relative)
            in_repository = in_repository and not node.has_git
            node = node.parent
        return next((d for d in decided if d is not None), False)


def descend(parent: IgnoreDir | None, backend: Backend, directory: str, entries: Iterable[DirEntry]) -> IgnoreDir | None:
    """The rules in force inside `directory`, given its listing."""
    by_name = {e.name: e for e in entries}
    found: list[Rules | None] = [_read(backend, directory, name) if name in by_name else None for name in IGNORE_FILES]
    git = by_name.get(".git")
    found.append(_read(backend, directory, ".git/info/exclude") if git is not None and git.is_dir else None)
    if not any(found) and git is None:
        return parent
    return IgnoreDir(directory, parent, (found[0], found[1], found[2], found[3]), git is not None)


def rules_above(backend: Backend, root: str) -> IgnoreDir | None:
    """The rules that `root`'s ancestors (`/` first) impose on what is below `root`."""
    rules: IgnoreDir | None = None
    ancestors: list[str] = []
    directory = root
    while directory != "/":
        directory = posixpath.dirname(directory)
        ancestors.append(directory)
    for directory in reversed(ancestors):
        try:
            entries = backend.list_dir(directory)
        except OSError:
            continue  # unreadable: as if it had no ignore files
        rules = descend(rules, backend, directory, entries)
    return rules


def _read(backend: Backend, directory: str, name: str) -> Rules | None:
    try:
        data = backend.read_bytes(posixpath.join(directory, name))
    except OSError:
        return None
    return parse(data.decode("utf-8", "replace")) or None


class Reach:
    """Would a walk honouring ignore files, started at `base`, reach a given file below it?

    For results ripgrep found with a `--glob`, which overrides ignore files for what it
    matches: each directory on the way is looked at once (its listing, its ignore files).
    Hidden entries and SKIP_DIRS are not checked here: ripgrep's own overrides drop them.
    """

    def __init__(self, backend: Backend, base: str) -> None:
        self._backend = backend
        self._base = base.rstrip("/") or "/"
        self._dirs: dict[str, tuple[bool, IgnoreDir | None]] = {}

    def file(self, relative: str) -> bool:
        directory = posixpath.dirname(relative)
        entered, rules = self._dir(directory)
        return entered and not (rules is not None and rules.ignored(posixpath.join(self._base, relative), False))

    def _dir(self, relative: str) -> tuple[bool, IgnoreDir | None]:
        """Whether the walk enters `relative` (a directory below base, "" for base), and the
        rules in force inside it."""
        if relative in self._dirs:
            return self._dirs[relative]
        path = posixpath.join(self._base, relative) if relative else self._base
        if relative:
            entered, rules = self._dir(posixpath.dirname(relative))
            entered = entered and not (rules is not None and rules.ignored(path, True))
        else:
            entered, rules = True, rules_above(self._backend, self._base)
        if entered:
            try:
                entries = self._backend.list_dir(path)
            except OSError:
                entries = []
            rules = descend(rules, self._backend, path, entries)
        self._dirs[relative] = (entered, rules)
        return entered, rules
