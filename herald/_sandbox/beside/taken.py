"""A grant as taken next to the script: its guard (`take_grant`) and the form its users hold it
in (`LocalGrant`: local tools with their specs, roots made a Confinement, time left made a
deadline). Stdlib only, Python >= 3.8. The grant's types are wire/grant.py's.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Dict, List, Optional, Tuple, cast

from ..toolcore.callroots import Confinement
from ..wire.grant import FileLimits, GrantError, Roots, SearchGrant, ShellGrant, ToolSpec

if sys.version_info >= (3, 11):  # for the checker: NotRequired is not in 3.8's typing
    from typing import NotRequired, TypedDict
else:  # at run time the annotations below are never evaluated (postponed annotations)
    from typing import TypedDict

    NotRequired = None


class LocalGrant(TypedDict):
    """A grant as taken next to the script: its local names with their specs, its roots made
    a Confinement, its time left a deadline."""

    allowed: List[str]
    local: Dict[str, ToolSpec]
    max_calls: int
    cwd: str
    files: FileLimits
    roots: NotRequired[Roots]
    shell: NotRequired[ShellGrant]
    search: NotRequired[SearchGrant]
    confinement: Optional[Confinement]


_NUMBER = (int, float)
_NUMBER_OR_NONE = (int, float, type(None))
Fields = Tuple[Tuple[str, Tuple[type, ...]], ...]
_FILES: Fields = (("read_max_bytes", (int,)), ("read_max_line_chars", (int,)), ("read_max_chars", (int,)))
_SHELL: Fields = (("state_path", (str,)), ("cwd", (str,)), ("bin", (str,)), ("max_output_bytes", _NUMBER),
                  ("timeout", _NUMBER), ("time_left", _NUMBER_OR_NONE))
_SEARCH: Fields = (("python_only", (bool,)), ("bin", (str,)), ("max_output_bytes", (int,)), ("timeout", _NUMBER),
                   ("time_left", _NUMBER_OR_NONE))
_ROOT_KINDS = ("write", "read", "masked", "unmasked", "unmasked_read")


def _fields(part: Any, fields: Fields, what: str) -> None:
    if not isinstance(part, dict):
        raise GrantError("%s must be an object" % what)
    for key, kinds in fields:
        if not isinstance(part.get(key), kinds):  # time_left may be left out (None)
            raise GrantError("%s: %r must be %s" % (what, key, "/".join(k.__name__ for k in kinds)))


def _prefixes(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(p, str) and p.startswith("/") for p in value)


def take_grant(grant: Any, specs: Dict[str, ToolSpec]) -> LocalGrant:
    """The guard of a start or code frame's "tools": checked against `specs` (tool_specs) and
    taken up (a copy: the frame is not changed). GrantError when it is malformed or names a
    tool without a schema."""
    if not isinstance(grant, dict):
        raise GrantError("a grant must be an object")
    allowed, names = grant.get("allowed"), grant.get("local")
    if not isinstance(allowed, list) or not all(isinstance(name, str) for name in allowed):
        raise GrantError("a grant's 'allowed' must list tool names")
    if not isinstance(names, list) or not all(isinstance(name, str) and name in specs for name in names):
        raise GrantError("a grant's 'local' must list tools whose schemas came")
    if not isinstance(grant.get("max_calls"), int):
        raise GrantError("a grant's 'max_calls' must be a number")
    cwd = grant.get("cwd")
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        raise GrantError("a grant's 'cwd' must be an absolute path")
    _fields(grant.get("files"), _FILES, "files")
    taken = dict(grant, local={name: specs[name] for name in names}, confinement=None)
    if "terminal" in names:
        _fields(grant.get("shell"), _SHELL, "shell")
    if "search_files" in names:
        _fields(grant.get("search"), _SEARCH, "search")
    for key in ("shell", "search"):
        timed = grant.get(key)
        if isinstance(timed, dict) and isinstance(timed.get("time_left"), _NUMBER):
            taken[key] = dict(timed, deadline=time.monotonic() + timed["time_left"])
    roots = grant.get("roots")
    if roots is not None:
        if not isinstance(roots, dict) or "write" not in roots or "read" not in roots \
                or not all(_prefixes(roots.get(kind, [])) for kind in _ROOT_KINDS):
            raise GrantError("a grant's 'roots' must list '/dir/' prefixes")
        taken["confinement"] = Confinement.from_wire(cast(Roots, roots))
    return cast(LocalGrant, taken)
