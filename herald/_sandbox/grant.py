"""The grant: what a run lets be answered next to its script, as types, and its one guard.

Stdlib only, Python >= 3.8 (the sandbox package). Herald computes a `ToolGrant` per run (and per
kernel cell) in one place, runtime/backend_tools.py `BackendTools.grant`, and sends it in the
start or code frame's "tools" (frames.py); the schemas of the tools it may name (`ToolSpec`)
travel once, in the prepare frame's "tool_specs" (backend mode) or the start frame's (host
mode). Next to the script, `take_grant` checks both and gives the grant as its users take it
(`LocalGrant`): in a supervisor (localtools.py, localcall.py) or in the script's own process
(selfserve.py). What each side does with it is said there.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, cast

if sys.version_info >= (3, 11):  # for the checker: NotRequired is not in 3.8's typing
    from typing import NotRequired, TypedDict
else:  # at run time the annotations below are never evaluated (postponed annotations)
    from typing import TypedDict

    NotRequired = None
if TYPE_CHECKING:
    from .confinement import Confinement

# The tools the sandbox package's core can run (textfiles.TOOLS, the terminal, the search).
TOOL_NAMES = ("read_file", "write_file", "patch", "terminal", "search_files")


class GrantError(ValueError):
    """A grant or its schemas are malformed: nothing is answered next to the script then."""


class ToolSpec(TypedDict):
    """What binding a tool's arguments reads of its schema (toolcore.bind_arguments)."""

    properties: Dict[str, Any]
    required: List[str]
    refused: Dict[str, Any]
    writes: NotRequired[bool]  # it changes files: the workspace's write roots apply


class FileLimits(TypedDict):
    read_max_bytes: int
    read_max_line_chars: int
    read_max_chars: int


class Roots(TypedDict):
    """A call's confinement as the Gate gives it ("/dir/" prefixes: confinement.py)."""

    write: List[str]
    read: List[str]
    masked: NotRequired[List[str]]
    unmasked: NotRequired[List[str]]
    unmasked_read: NotRequired[List[str]]


class ShellGrant(TypedDict):
    """The session shell the supervisor's terminal shares (localshell.py)."""

    state_path: str
    cwd: str
    has_state: bool
    bin: str
    max_output_bytes: int
    timeout: float
    time_left: Optional[float]  # of the run, when it has a deadline
    deadline: NotRequired[float]  # time_left on the taker's clock (take_grant)


class SearchGrant(TypedDict):
    """What search_files' place in the supervisor needs (searchplace.py)."""

    python_only: bool
    bin: str
    max_output_bytes: int
    timeout: float
    time_left: Optional[float]
    deadline: NotRequired[float]


class ToolGrant(TypedDict):
    """A run's grant, as sent."""

    allowed: List[str]  # every tool the script may call (the Dispatcher's allow-list): each call counts
    local: List[str]  # the ones answered next to the script (each with its ToolSpec)
    max_calls: int  # what is left of the run's call budget
    cwd: str  # the session's directory (CwdFrames move it)
    files: FileLimits
    roots: NotRequired[Roots]  # under a confining profile the workspace; on the local backend the masks
    shell: NotRequired[ShellGrant]  # with "terminal" in local
    search: NotRequired[SearchGrant]  # with "search_files" in local


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


def tool_specs(specs: Any) -> Dict[str, ToolSpec]:
    """The guard of "tool_specs": schemas of tools the core can run."""
    if not isinstance(specs, dict):
        raise GrantError("tool_specs must be an object")
    for name, spec in specs.items():
        if name not in TOOL_NAMES or not isinstance(spec, dict) or not isinstance(spec.get("properties"), dict) \
                or not isinstance(spec.get("required"), list) or not isinstance(spec.get("refused"), dict):
            raise GrantError("tool_specs: %.40r is not a tool the core runs, with its schema" % (name,))
    return cast(Dict[str, ToolSpec], specs)


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
        from .confinement import Confinement

        taken["confinement"] = Confinement.from_wire(cast(Roots, roots))
    return cast(LocalGrant, taken)
