"""Locating `old_string` for `patch`: exactly first, then forgiving whitespace, line by line.

Models often copy a block with its indentation shifted or trailing spaces lost. Each strategy
compares whole lines through a normaliser; the first strategy that finds anything wins, so an
exact match is never overridden by a looser one. Stdlib only, Python >= 3.8 (the sandbox package):
the backend-mode supervisor patches files with it too.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

Span = Tuple[int, int]

_STRATEGIES: List[Tuple[str, Callable[[str], str]]] = [
    ("whitespace", str.rstrip),  # trailing whitespace differs
    ("indentation", str.strip),  # indentation differs (new_string is re-indented)
    ("collapsed-whitespace", lambda line: " ".join(line.split())),  # runs of spaces differ too
]


def find_matches(text: str, old: str) -> Tuple[List[Span], str]:
    """Non-overlapping spans of `text` matching `old`, and the strategy that found them."""
    spans: List[Span] = []
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
        for i in _occurrences(normalised, wanted):
            end = starts[i + size] - 1  # end of the last matched line, before its newline
            if keep_newline and end < len(text):
                end += 1
            elif end > starts[i] and text[end - 1] == "\r":
                end -= 1  # keep a CRLF line's CR: new_string does not end with one
            spans.append((starts[i], end))
        if spans:
            return spans, name
    return [], "exact"


def _occurrences(lines: List[str], wanted: List[str]) -> List[int]:
    """Where `wanted` starts in `lines`, leftmost first, not overlapping: Knuth-Morris-Pratt,
    so the time is linear (comparing at every start costs lines x wanted, minutes for a big
    file and a long old_string of near-repeats, during which patch holds the file's lock)."""
    fallback = [0] * len(wanted)  # the longest proper prefix of wanted[:k + 1] that is also its suffix
    k = 0
    for i in range(1, len(wanted)):
        while k and wanted[i] != wanted[k]:
            k = fallback[k - 1]
        if wanted[i] == wanted[k]:
            k += 1
        fallback[i] = k
    found: List[int] = []
    k = 0
    for i, line in enumerate(lines):
        while k and line != wanted[k]:
            k = fallback[k - 1]
        if line == wanted[k]:
            k += 1
            if k == len(wanted):
                found.append(i + 1 - k)
                k = 0  # the next match starts after this one
    return found


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
