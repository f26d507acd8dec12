"""A recording: one JSON object per line.

    {"format": "herald-recording", "version": 1, "herald": "0.1.0", "time": 1764283200.5,
     "script_sha256": "...", "backend": "docker", "exec_mode": "host", "tools": [...],
     "max_tool_calls": 50, ...}                                  the header, first
    {"call": 1, "tool": "read_file", "args": {...}, "result": ...}   one per call, in the order
    {"call": 2, "tool": "patch", "args": {...}, "error": {"type": ..., "message": ...}}  they ended
    {"end": {"calls": 2, "status": "success", "exit_code": 0, "output": "..."}}   the last line

A file without its `end` line was cut (Herald killed, a full disk): it is refused, as is any line
that is not what this module writes, so a replay never starts on a recording it cannot finish.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..calls import CallOutcome

FORMAT = "herald-recording"
VERSION = 1
SHOWN_ARGS = 160  # characters of a call's arguments in a message


class RecordingError(Exception):
    """A recording that cannot be replayed; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class RecordedCall:
    number: int  # its place in the recording, from 1
    tool: str
    args: Any
    outcome: CallOutcome

    def describe(self) -> str:
        return f"#{self.number} {describe(self.tool, self.args)}"


@dataclass(frozen=True, slots=True)
class Recording:
    path: Path
    header: dict[str, Any]
    calls: list[RecordedCall]
    end: dict[str, Any]

    @property
    def tools(self) -> list[str]:
        return [str(name) for name in self.header.get("tools", [])]


@functools.cache
def herald_version() -> str:
    try:
        return importlib.metadata.version("herald")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def canonical(args: Any) -> str:
    """`args` as one string that is the same for the same arguments (keys sorted)."""
    return json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)


def describe(tool: Any, args: Any) -> str:
    """A call as a reader sees it in a message: `read_file({"path":"a.txt"})`, cut when long."""
    shown = canonical(args)
    if len(shown) > SHOWN_ARGS:
        shown = shown[:SHOWN_ARGS] + f"... ({len(shown)} characters)"
    return f"{tool}({shown})"


def script_sha256(script: str) -> str:
    return hashlib.sha256(script.encode("utf-8", "surrogatepass")).hexdigest()


def header(script: str, *, backend: str, exec_mode: str, tools: list[str], max_tool_calls: int,
           extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The first line: what was recorded, by what, against which backend."""
    return {"format": FORMAT, "version": VERSION, "herald": herald_version(), "time": round(time.time(), 3),
            "script_sha256": script_sha256(script), "backend": backend, "exec_mode": exec_mode,
            "tools": sorted(tools), "max_tool_calls": max_tool_calls, **(extra or {})}


def call_record(number: int, tool: str, args: Any, outcome: CallOutcome) -> dict[str, Any]:
    return {"call": number, "tool": tool, "args": args, **outcome}


def read_recording(path: Path) -> Recording:
    """The recording at `path`, checked whole before anything runs (RecordingError says why not)."""
    try:
        with path.open(encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(f"cannot read the recording {path}: {exc}") from None
    records = [_parse(path, number, line) for number, line in enumerate(lines, 1) if line.strip()]
    if not records:
        raise RecordingError(f"{path} is empty: it is not a recording (make one with herald exec --record FILE)")
    head = records[0]
    if head.get("format") != FORMAT:
        raise RecordingError(f"{path} is not a Herald recording (its first line has no \"format\": \"{FORMAT}\")")
    if head.get("version") != VERSION:
        raise RecordingError(f"{path} is a recording of format version {head.get('version')!r}; this Herald "
                             f"reads version {VERSION}: record the run again")
    end = records[-1].get("end") if len(records) > 1 else None
    if not isinstance(end, dict):
        raise RecordingError(f"{path} is cut short: it has no end line (the recording run did not finish "
                             "writing it); record the run again")
    calls = [_call(path, record) for record in records[1:-1]]
    if end.get("calls") != len(calls):
        raise RecordingError(f"{path} says it holds {end.get('calls')!r} call(s) but has {len(calls)}: "
                             "it was changed or cut; record the run again")
    return Recording(path, head, calls, end)


def _parse(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError:
        raise RecordingError(f"{path}, line {number}: not JSON (the file is cut or damaged); "
                             "record the run again") from None
    if not isinstance(record, dict):
        raise RecordingError(f"{path}, line {number}: not a JSON object; record the run again")
    return record


def _call(path: Path, record: dict[str, Any]) -> RecordedCall:
    number, tool, error = record.get("call"), record.get("tool"), record.get("error")
    answered = ("result" in record) != (error is not None)
    error_ok = error is None or (isinstance(error, dict) and isinstance(error.get("type"), str)
                                 and isinstance(error.get("message"), str))
    if not (isinstance(number, int) and isinstance(tool, str) and "args" in record and answered and error_ok):
        raise RecordingError(f"{path}: the record of call {number!r} is malformed (it needs call, tool, args, "
                             "and a result or an error with a type and a message); record the run again")
    outcome: CallOutcome = {"error": error} if error is not None else {"result": record["result"]}
    return RecordedCall(number, tool, record["args"], outcome)
