"""Repair the malformed tool-call argument JSON that models (local ones especially) produce.

Passes, cheapest first: parse as is (control characters allowed); strip a code fence; drop
trailing commas; escape raw control characters inside strings; close unclosed strings, arrays
and objects; drop excess closing brackets. What still cannot be parsed becomes `{}` with an
error message: an empty object makes a recoverable tool error, while invalid JSON left in the
history would make the provider reject every later request.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)
_CONTROL_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


@dataclass(frozen=True)
class RepairResult:
    arguments: dict[str, Any]
    repaired: bool  # the text was not valid JSON as sent
    error: str | None = None  # set when nothing could be recovered (arguments is then {})

    @property
    def canonical(self) -> str:
        """Valid JSON text of the arguments, for the history."""
        return json.dumps(self.arguments, ensure_ascii=False)


def _loads(text: str) -> Any:
    return json.loads(text, strict=False)


def _scan(text: str) -> tuple[str, list[str], bool]:
    """Escape control characters inside strings; return (text, open brackets, inside a string)."""
    out: list[str] = []
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            elif ch in _CONTROL_ESCAPES or ord(ch) < 0x20:
                out.append(_CONTROL_ESCAPES.get(ch, f"\\u{ord(ch):04x}"))
                continue
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if stack and stack[-1] == ch:
                stack.pop()
            else:
                continue  # an excess or mismatched closer: drop it
        out.append(ch)
    if escaped:
        out.pop()  # a dangling backslash at the cut
    return "".join(out), stack, in_string


def _close(text: str) -> str:
    fixed, stack, in_string = _scan(text)
    if in_string:
        fixed += '"'
    fixed = fixed.rstrip()
    while fixed.endswith(","):
        fixed = fixed[:-1].rstrip()
    if fixed.endswith(":"):
        fixed += " null"
    return _TRAILING_COMMA.sub(r"\1", fixed + "".join(reversed(stack)))


def repair_arguments(raw: str | None) -> RepairResult:
    text = (raw or "").strip()
    if not text:
        return RepairResult({}, repaired=False)
    try:
        value = _loads(text)
        repaired = False
    except ValueError:
        value, repaired = _repair(text), True
    if value is _FAILED:
        return RepairResult(
            {},
            repaired=True,
            error=(
                "The arguments of this tool call were not valid JSON and could not be repaired, so "
                f"the tool was not run. Resend the call with a JSON object of arguments. Received: {text[:200]!r}"
            ),
        )
    if not isinstance(value, dict):
        return RepairResult(
            {},
            repaired=True,
            error=f"Tool arguments must be a JSON object of named values, got {type(value).__name__}: {text[:200]!r}",
        )
    return RepairResult(value, repaired=repaired)


_FAILED = object()


def _repair(text: str) -> Any:
    fence = _FENCE.match(text)
    candidates = [fence.group(1)] if fence else []
    candidates.append(text)
    for candidate in candidates:
        for attempt in (
            candidate,
            _TRAILING_COMMA.sub(r"\1", candidate),
            _close(candidate),
        ):
            try:
                return _loads(attempt)
            except ValueError:
                continue
    return _FAILED
