"""API keys taken out of the environment at start.

A key in os.environ is inherited by every process Herald starts that is not given a scrubbed
environment (a library's helper, a backend's CLI) and stays readable there. The command line
therefore moves every `*_API_KEY` variable out of os.environ as it starts
(`take_api_keys`); Herald's own readers look them up through `herald_environ()`, which sees
the environment plus the keys taken.

Removing a variable from os.environ does not remove its bytes from the block the kernel copied
at exec, which /proc/PID/environ shows for the life of the process (to the same user, and to
root even when we are not dumpable). So on Linux the values taken are also overwritten in place
there, and the block then shows `NAME=` followed by NUL bytes.
"""

from __future__ import annotations

import ctypes
import os
from collections import ChainMap
from collections.abc import Iterable, Mapping

_taken: dict[str, str] = {}

# Fields of /proc/PID/stat, counted from 1 (proc(5)): where the exec-time environment block lies.
_ENV_START_FIELD = 50
_ENV_END_FIELD = 51


def take_api_keys() -> list[str]:
    """Move every `*_API_KEY` variable from os.environ to Herald's private store; their names."""
    names = [name for name in os.environ if name.upper().endswith("_API_KEY")]
    for name in names:
        _taken[name] = os.environ.pop(name)
    scrub_exec_environment(names)
    return names


def herald_environ() -> Mapping[str, str]:
    """Herald's view of its environment: os.environ plus the keys `take_api_keys` removed."""
    return ChainMap(os.environ, _taken)


def scrub_exec_environment(names: Iterable[str]) -> int:
    """Overwrite with NULs the values of `names` in this process's exec-time environment block
    (what /proc/self/environ shows); how many values were overwritten. Does nothing where the
    block's place is not known (not Linux, or a kernel older than 3.5).

    Safe because the C library's `environ` no longer points at these strings once os.environ
    dropped them (unsetenv), and Python's own os.environ is a copy made at start-up."""
    span = _environment_block()
    if span is None:
        return 0
    start, end = span
    block = ctypes.string_at(start, end - start)
    wanted = {name.encode(): True for name in names}
    scrubbed = 0
    offset = 0
    for entry in block.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and value and name in wanted:
            ctypes.memset(start + offset + len(name) + 1, 0, len(value))
            scrubbed += 1
        offset += len(entry) + 1
    return scrubbed


def _environment_block() -> tuple[int, int] | None:
    try:
        with open("/proc/self/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
    fields = text[text.rindex(b")") + 2 :].split()
    first = 3  # the field number of fields[0]
    if len(fields) < _ENV_END_FIELD - first + 1:
        return None
    start = int(fields[_ENV_START_FIELD - first])
    end = int(fields[_ENV_END_FIELD - first])
    return (start, end) if 0 < start < end else None
