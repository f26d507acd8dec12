"""The lines of .gitignore-style files (.gitignore, .ignore, .rgignore), read as ripgrep reads them.

Stdlib only, Python >= 3.8 (the sandbox package): search_files walks with these rules on the
host and inside a backend's supervisor alike (search/ignorefiles.py says which files apply where).

A path is matched as itself, never through its parent directories (the walk does not enter an
ignored directory, so what is below it never needs asking), and a directory is told by
`is_dir`. What a line means:

- Blank lines and lines starting with `#` mean nothing; `\\#` and `\\!` start a line literally.
  Trailing spaces are dropped unless escaped (`foo\\ `). A lone `!` re-includes everything.
- `!` in front re-includes what earlier lines excluded; a trailing `/` matches directories only.
- A pattern with a `/` at its start or in its middle is anchored at the ignore file's directory;
  one without matches a name at any depth.
- `*` and `?` never match `/`; `[abc]`, `[a-z]`, `[!x]` / `[^x]` are one character (never `/`);
  `\\` escapes the next character. `**` as a whole component crosses directories: `**/x` (x at
  any depth), `a/**` (everything below a), `a/**/b` (b anywhere below a, a/b included), `**`
  alone (everything); anywhere else it is `*`.
- A line that cannot mean anything (a range such as `[z-a]`, an unclosed `[`, a trailing `\\`)
  is skipped, and the others still apply.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Tuple


class Rule(NamedTuple):
    """One line of an ignore file."""

    negated: bool  # a `!` line: re-includes
    dir_only: bool  # a trailing `/`: matches directories only
    regex: "re.Pattern[str]"  # matched in full against the path relative to the file's directory

    def matches(self, relative: str, is_dir: bool) -> bool:
        return (is_dir or not self.dir_only) and self.regex.fullmatch(relative) is not None


class _Invalid(ValueError):
    """A line that cannot mean anything: skipped."""


def parse_lines(text: str) -> Tuple[Rule, ...]:
    """The rules of one ignore file's text, in the file's order; lines that mean nothing dropped."""
    rules: List[Rule] = []
    for line in text.splitlines():
        try:
            rule = parse_line(line)
        except (_Invalid, re.error):
            continue
        if rule is not None:
            rules.append(rule)
    return tuple(rules)


def parse_line(line: str) -> Optional[Rule]:
    """One line's rule; None for a blank line or a comment; _Invalid (or re.error) when it is malformed."""
    if line.startswith("#"):
        return None
    line = _strip_trailing_spaces(line)
    if line.rstrip(" ") == "!" and line.startswith("!"):  # ripgrep: a lone "!" re-includes everything
        line = "!**"
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    dir_only = line.endswith("/") and not line.endswith("\\/")
    if dir_only:
        line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    body = line[1:] if line.startswith("/") else line
    if not body:
        return None
    pattern = _translate(body)
    if not anchored and not pattern.startswith("(?:.*/)?") and pattern != ".*":
        pattern = "(?:.*/)?" + pattern  # a name at any depth
    return Rule(negated, dir_only, re.compile(pattern, re.DOTALL))


def _strip_trailing_spaces(line: str) -> str:
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        backslashes = 0
        at = end - 2
        while at >= 0 and line[at] == "\\":
            backslashes += 1
            at -= 1
        if backslashes % 2:  # `\ `: an escaped space stays
            break
        end -= 1
    return line[:end]


def _translate(body: str) -> str:
    """The regex of a pattern without its `!`, trailing `/` and leading `/`."""
    parts = body.split("/")
    out: List[str] = []
    last = len(parts) - 1
    for index, part in enumerate(parts):
        if part == "**":
            if index == last:
                out.append(".*" if index == 0 else "/.*")  # everything (below)
            elif index == 0:
                out.append("(?:.*/)?")  # any directories above
            else:
                out.append("/(?:.*/)?")  # zero or more directories between
            continue
        if index > 0 and parts[index - 1] != "**":
            out.append("/")
        out.append(_component(part))
    return "".join(out)


def _component(part: str) -> str:
    """The regex of one path component: `*`, `?`, classes and escapes, never matching `/`."""
    out: List[str] = []
    i, n = 0, len(part)
    while i < n:
        c = part[i]
        if c == "\\":
            if i + 1 >= n:
                raise _Invalid("a trailing backslash escapes nothing")
            out.append(re.escape(part[i + 1]))
            i += 2
        elif c == "*":
            while i < n and part[i] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            regex, i = _class(part, i)
            out.append(regex)
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _class(part: str, start: int) -> Tuple[str, int]:
    """The regex of the class opening at `start`, and the index just past it."""
    i = start + 1
    negated = i < len(part) and part[i] in "!^"
    if negated:
        i += 1
    members: List[str] = []
    first = True
    while True:
        if i >= len(part):
            raise _Invalid("'[' is never closed")
        c = part[i]
        if c == "]" and not first:
            i += 1
            break
        first = False
        if c == "\\" and i + 1 < len(part):
            c = part[i + 1]
            i += 1
        i += 1
        if i + 1 < len(part) and part[i] == "-" and part[i + 1] != "]":
            high = part[i + 1]
            if high == "\\" and i + 2 < len(part):
                high = part[i + 2]
                i += 1
            i += 2
            if high < c:
                raise _Invalid("an empty range")
            members.append("%s-%s" % (re.escape(c), re.escape(high)))
        else:
            members.append(re.escape(c))
    body = "".join(members)
    return ("[^/%s]" % body if negated else "(?!/)[%s]" % body), i
