"""The grant: what a run lets be answered next to its script, as types, and the guard of the
tool schemas it names.

Stdlib only, Python >= 3.8 (the sandbox package). Herald's policy computes a `ToolGrant` per run
(and per kernel cell) in one place, policy/grant.py `ToolGrants.grant`, and runtime/backend_tools.py
sends it in the start or code frame's "tools" (wire/frames.py); the schemas of the tools it may
name (`ToolSpec`) travel once, in the prepare frame's "tool_specs" (backend mode) or the start frame's (host
mode). Next to the script, beside/taken.py `take_grant` checks both and gives the grant as its
users hold it: in a supervisor (beside/localtools.py, beside/workers.py) or in the script's own
process (child/selfserve.py).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, cast

if sys.version_info >= (3, 11):  # for the checker: NotRequired is not in 3.8's typing
    from typing import NotRequired, TypedDict
else:  # at run time the annotations below are never evaluated (postponed annotations)
    from typing import TypedDict

    NotRequired = None

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
    """A call's confinement as the Gate gives it ("/dir/" prefixes: toolcore/callroots.py)."""

    write: List[str]
    read: List[str]
    masked: NotRequired[List[str]]
    unmasked: NotRequired[List[str]]
    unmasked_read: NotRequired[List[str]]


class ShellGrant(TypedDict):
    """The session shell the supervisor's terminal shares (shell/localshell.py)."""

    state_path: str
    cwd: str
    has_state: bool
    bin: str
    max_output_bytes: int
    timeout: float
    time_left: Optional[float]  # of the run, when it has a deadline
    deadline: NotRequired[float]  # time_left on the taker's clock (take_grant)


class SearchGrant(TypedDict):
    """What search_files' place in the supervisor needs (beside/searchplace.py)."""

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


def tool_specs(specs: Any) -> Dict[str, ToolSpec]:
    """The guard of "tool_specs": schemas of tools the core can run."""
    if not isinstance(specs, dict):
        raise GrantError("tool_specs must be an object")
    for name, spec in specs.items():
        if name not in TOOL_NAMES or not isinstance(spec, dict) or not isinstance(spec.get("properties"), dict) \
                or not isinstance(spec.get("required"), list) or not isinstance(spec.get("refused"), dict):
            raise GrantError("tool_specs: %.40r is not a tool the core runs, with its schema" % (name,))
    return cast(Dict[str, ToolSpec], specs)
