"""File globs for `search_files`: one meaning, decided here, for both search engines.

- `*` and `?` match within one path component (never `/`); `[abc]`, `[a-z]`, `[!x]` / `[^x]`
  are character classes (never matching `/` either); `\\` escapes the next character.
- `**` as a whole component crosses directories: `**/x` (x at any depth), `a/**` (everything
  under a), `a/**/b` (b anywhere under a, a/b included). Elsewhere `**` is just `*`.
- `{a,b}` is alternation (nestable); `!` in front negates the whole glob.
- A glob without `/` matches a file's name at any depth; a glob with `/` is matched against
  the path relative to the search root (a leading `/` only makes that explicit).

These are ripgrep's `--glob` rules, but ripgrep never gets the caller's glob as it is: its `?`
and classes match bytes, not characters, and a matching `--glob` overrides .gitignore
(`-g '*.log'` lists ignored logs). It is told a narrowing that selects at least the matching
files (`Glob.name_narrowing`, `Glob.path_narrowing`); this module's matcher decides.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

GLOB_SPECIALS = frozenset("*?[]{}\\!")
MAX_ALTERNATIVES = 64  # `{a,b}{c,d}...` multiplies out; past this ripgrep is not narrowed


class GlobError(ValueError):
    """A glob that cannot mean anything: the message says what is wrong."""


def escape(text: str) -> str:
    """A glob matching `text` literally."""
    return "".join("\\" + c if c in GLOB_SPECIALS else c for c in text)


def expand_braces(glob: str) -> list[str]:
    """`*.{py,md}` -> [`*.py`, `*.md`]; nested groups multiply out. Escapes and classes are
    copied through untouched, so `\\{` and `[{]` stay literal."""
    start = _find_brace(glob)
    if start < 0:
        if _find_unescaped(glob, "}") >= 0:
            raise GlobError("'}' without a matching '{' (write \\} for a literal brace)")
        return [glob]
    options, end = _split_group(glob, start)
    head, tail = glob[:start], glob[end + 1 :]
    expanded: list[str] = []
    for option in options:
        expanded += expand_braces(head + option + tail)
    return expanded


def _skip(glob: str, i: int) -> int:
    """Index just past the token at `i`: an escape pair, a whole class, or one character."""
    if glob[i] == "\\":
        return min(i + 2, len(glob))
    if glob[i] == "[":
        close = _class_end(glob, i)
        return close + 1 if close >= 0 else i + 1
    return i + 1


def _find_unescaped(glob: str, char: str) -> int:
    i = 0
    while i < len(glob):
        if glob[i] == char:
            return i
        i = _skip(glob, i)
    return -1


def _find_brace(glob: str) -> int:
    return _find_unescaped(glob, "{")


def _split_group(glob: str, start: int) -> tuple[list[str], int]:
    """The top-level options of the `{...}` group opening at `start`, and its closing index."""
    depth, i, begin = 0, start, start + 1
    options: list[str] = []
    while i < len(glob):
        c = glob[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return [*options, glob[begin:i]], i
        elif c == "," and depth == 1:
            options.append(glob[begin:i])
            begin = i + 1
        i = _skip(glob, i)
    raise GlobError("'{' is never closed (write \\{ for a literal brace)")


def _class_end(glob: str, start: int) -> int:
    """Index of the `]` closing the class opening at `start`, or -1 (then `[` is literal)."""
    i = start + 1
    if i < len(glob) and glob[i] in "!^":
        i += 1
    if i < len(glob) and glob[i] == "]":  # a leading `]` is a member, not the end
        i += 1
    while i < len(glob) and glob[i] != "]":
        i += 1
    return i if i < len(glob) else -1


@dataclass(frozen=True)
class _Token:
    """One step of a brace-free glob: a character (`text`, or any but "/" that `cls` matches,
    `cls` None for `?`), or a run: `star` ([^/]*), `any` (.*, a trailing `**`), `dirs` ((?:.*/)?,
    a `**/`)."""

    kind: str  # "char" | "one" | "star" | "any" | "dirs"
    text: str = ""
    cls: re.Pattern[str] | None = None


_RUNS = ("star", "any", "dirs")
_REGEX = {"star": "[^/]*", "any": ".*", "dirs": "(?:.*/)?"}
# A backtracking regex tries up to (n + 1) ** runs splits of an n-character path among a glob's
# runs, each checked in about n + tokens steps: within this many, the regex (fast in C) is
# used, past it the NFA (linear, in Python). Common globs on common paths stay on the regex.
REGEX_BUDGET = 1_000_000


@dataclass(frozen=True)
class _Alternative:
    tokens: tuple[_Token, ...]
    regex: re.Pattern[str]
    runs: int

    def matches(self, subject: str) -> bool:
        n = len(subject)
        if (n + 1) ** self.runs * (n + len(self.tokens)) <= REGEX_BUDGET:
            return self.regex.fullmatch(subject) is not None
        return _matches(self.tokens, subject)


def _alternative(glob: str) -> _Alternative:
    tokens = _translate(glob)
    pieces = []
    for token in tokens:
        if token.kind == "char":
            pieces.append(re.escape(token.text))
        elif token.kind == "one":
            pieces.append("[^/]" if token.cls is None else f"(?!/){token.cls.pattern}")
        else:
            pieces.append(_REGEX[token.kind])
    runs = sum(token.kind in _RUNS for token in tokens)
    return _Alternative(tokens, re.compile("".join(pieces), re.DOTALL), runs)


def _translate(glob: str) -> tuple[_Token, ...]:
    """The tokens of one brace-free alternative."""
    out: list[_Token] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "\\":
            out.append(_Token("char", glob[i + 1] if i + 1 < n else "\\"))
            i += 2
        elif c == "*":
            run = i
            while i < n and glob[i] == "*":
                i += 1
            whole = (run == 0 or glob[run - 1] == "/") and (i == n or glob[i] == "/")
            if i - run >= 2 and whole:
                if i == n:
                    out.append(_Token("any"))  # `a/**`: everything below; `**` alone: everything
                else:
                    out.append(_Token("dirs"))  # `**/`: zero or more directories
                    i += 1
            else:
                out.append(_Token("star"))
        elif c == "?":
            out.append(_Token("one"))
            i += 1
        elif c == "[" and (close := _class_end(glob, i)) >= 0:
            body = glob[i + 1 : close]
            negated = body[:1] in ("!", "^")
            members = "".join(m if m == "-" else re.escape(m) for m in (body[1:] if negated else body))
            out.append(_Token("one", cls=re.compile(f"[^{members}]" if negated else f"[{members}]")))
            i = close + 1
        else:
            out.append(_Token("char", c))
            i += 1
    return tuple(out)


def _matches(tokens: tuple[_Token, ...], subject: str) -> bool:
    """Does `subject` match all of `tokens`? Every way through the glob is followed at once (an
    NFA), so the time is at most tokens x characters: a backtracking regex for `*a*a*a*a*b`
    takes time exponential in the runs on a long name, holding the GIL. A state is the index of the next
    token; ~index is inside a `dirs` that has consumed characters (it must end at a "/")."""
    states = _closure(tokens, {0})
    for ch in subject:
        after: set[int] = set()
        for i in states:
            _step(tokens, i, ch, after)
        if not after:
            return False
        states = _closure(tokens, after)
    return len(tokens) in states


def _closure(tokens: tuple[_Token, ...], states: set[int]) -> set[int]:
    """`states` and the states after them: runs may match nothing, so they are stepped over."""
    end = len(tokens)
    todo = [i for i in states if 0 <= i < end]
    while todo:
        i = todo.pop()
        if tokens[i].kind in _RUNS and i + 1 not in states:
            states.add(i + 1)
            if i + 1 < end:
                todo.append(i + 1)
    return states


def _step(tokens: tuple[_Token, ...], i: int, ch: str, after: set[int]) -> None:
    """Add to `after` the states that state `i` goes to on reading `ch`."""
    if i < 0:  # inside `dirs` ~i
        after.add(i)
        if ch == "/":
            after.add(~i + 1)
        return
    if i == len(tokens):
        return
    token = tokens[i]
    if token.kind == "char":
        if ch == token.text:
            after.add(i + 1)
    elif token.kind == "one":
        if ch != "/" and (token.cls is None or token.cls.fullmatch(ch)):
            after.add(i + 1)
    elif token.kind == "star":
        if ch != "/":
            after.add(i)
    elif token.kind == "any":
        after.add(i)
    else:  # dirs
        after.add(~i)
        if ch == "/":
            after.add(i + 1)


@dataclass(frozen=True)
class Glob:
    text: str
    negated: bool
    anchored: bool  # matched against the root-relative path, not the file name
    alternatives: tuple[str, ...]  # brace-free, without `!` and a leading `/`
    matchers: tuple[_Alternative, ...] = field(repr=False)

    def matches(self, relative: str) -> bool:
        """Does the file at `relative` (POSIX, relative to the search root) match?"""
        subject = relative if self.anchored else posixpath.basename(relative)
        return any(alternative.matches(subject) for alternative in self.matchers) != self.negated

    def name_narrowing(self) -> tuple[list[str], bool] | None:
        """File-name globs for ripgrep's `--type-add` that select at least the files this glob
        matches, and whether they select exactly those; None when no such narrowing exists.

        ripgrep's file types match names only, honour .gitignore, and take plain globs: so
        each alternative's last component is used, with `?`, classes and escapes widened to
        `*` (ripgrep's `?` and classes work on bytes, not characters).
        """
        if self.negated or len(self.alternatives) > MAX_ALTERNATIVES:
            return None
        names: list[str] = []
        exact = not self.anchored
        for alternative in self.alternatives:
            name = alternative.rsplit("/", 1)[-1]
            if "**" in name or not name:
                return None  # any name at all: nothing to narrow by
            plain, widened = _widen(name)
            if "," in plain or plain.startswith("include:"):
                return None  # --type-add syntax would misread these
            exact = exact and not widened
            if plain not in names:
                names.append(plain)
        return names, exact

    def path_narrowing(self) -> list[str] | None:
        """ripgrep `--glob`s (anchored, OR-ed) selecting at least the files this glob matches;
        None when there are none. ripgrep includes what such a glob matches even if ignore files
        exclude it: the caller must check what comes back (ignore.Reach does)."""
        if self.negated or len(self.alternatives) > MAX_ALTERNATIVES:
            return None
        globs = []
        for alternative in self.alternatives:
            # An override glob is read as a .gitignore line, which loses trailing spaces.
            trimmed = alternative.rstrip(" ")
            globs.append("/" + _widen(trimmed if trimmed == alternative else trimmed + "*")[0])
        return globs


def _widen(glob: str) -> tuple[str, bool]:
    """`glob` with `?`, classes and escapes turned into `*`: a plain glob ripgrep reads as we do,
    matching at least as much."""
    out: list[str] = []
    i, widened = 0, False
    while i < len(glob):
        c = glob[i]
        end = _skip(glob, i)
        if c in "?[]{}\\":
            widened = True
            c = "*"
        out.append(c)
        i = end
    # ripgrep reads `***` as neither `*` nor `**` (`/***/x` matches nothing); `**` covers both.
    return re.sub(r"\*{3,}", "**", "".join(out)), widened


def compile_glob(text: str) -> Glob:
    """Parse `text` once; GlobError says what is wrong with it."""
    body = text[1:] if text.startswith("!") else text
    if not body:
        raise GlobError("the glob is empty")
    if body.endswith("/"):
        raise GlobError(f"globs match files, not directories: for everything under it write '{body}**'")
    anchored = "/" in body
    alternatives = tuple(a.lstrip("/") for a in expand_braces(body))
    try:
        matchers = tuple(_alternative(a) for a in alternatives)
    except re.error as exc:  # a class such as [z-a]
        raise GlobError(f"bad character class ({exc.msg})") from None
    return Glob(text, text.startswith("!"), anchored, alternatives, matchers)


def name_glob(pattern: str) -> str:
    """The glob for `search_files(target="files")`'s pattern: a glob as given, or a plain text
    found anywhere in the file name (in the relative path when it holds a `/`)."""
    if set("*?[") & set(pattern):
        return pattern
    literal = f"*{escape(pattern)}*"
    return f"**/{literal}" if "/" in pattern else literal
