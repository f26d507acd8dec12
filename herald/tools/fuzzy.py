"""Locating `old_string` for `patch`: exactly first, then forgiving whitespace, line by line.

Models often copy a block with its indentation shifted or trailing spaces lost. Each strategy
compares whole lines through a normaliser; the first strategy that finds anything wins, so an
exact match is never overridden by a looser one.
"""

from __future__ import annotations

from collections.abc import Callable

Span = tuple[int, int]

_STRATEGIES: list[tuple[str, Callable[[str], str]]] = [
    ("whitespace", str.rstrip),  # trailing whitespace differs
    ("indentation", str.strip),  # indentation differs (new_string is re-indented)
    ("collapsed-whitespace", lambda line: " ".join(line.split())),  # runs of spaces differ too
]


def find_matches(text: str, old: str) -> tuple[list[Span], str]:
    """Non-overlapping spans of `text` matching `old`, and the strategy that found them."""
    spans: list[Span] = []
    start = text.find(old)
    while start >= 0:
        spans.append((start, start + len(old)))
        start = text.find(old, start + len(old))
    if spans:
        return spans, "exact"
    old_lines = old.split("\n")
    keep_newline = old.endswith("\n")
    if keep_newline:
        old_lines.pop()
    while old_lines and not old_lines[0].strip():
        old_lines.pop(0)
    while old_lines and not old_lines[-1].strip():
        old_lines.pop()
    if not old_lines:
        return [], "exact"
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    size = len(old_lines)
    for name, normalise in _STRATEGIES:
        wanted = [normalise(line) for line in old_lines]
        normalised = [normalise(line) for line in lines]
        i = 0
        while i + size <= len(lines):
            if normalised[i : i + size] == wanted:
                end = starts[i + size] - 1  # end of the last matched line, before its newline
                if keep_newline and end < len(text):
                    end += 1
                elif end > starts[i] and text[end - 1] == "\r":
                    end -= 1  # keep a CRLF line's CR: new_string does not end with one
                spans.append((starts[i], end))
                i += size
            else:
                i += 1
        if spans:
            return spans, name
    return [], "exact"


def _indent(block: str) -> str:
    for line in block.split("\n"):
        if line.strip():
            return line[: len(line) - len(line.lstrip())]
    return ""


def reindent(matched: str, old: str, new: str) -> str:
    """Shift `new` by the indentation difference between the file's text and `old`."""
    have, gave = _indent(matched), _indent(old)
    if have == gave:
        return new
    out = []
    for line in new.split("\n"):
        if not line.strip():
            out.append(line)
        elif line.startswith(gave):
            out.append(have + line[len(gave) :])
        else:
            out.append(have + line.lstrip())
    return "\n".join(out)
