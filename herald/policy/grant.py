"""The grant: which of a run's calls are answered next to its script, and within what, decided
here in one place (`ToolGrants.grant`), for both places that answer them: a backend-mode run's
supervisor (herald/_sandbox/beside/localtools.py) and a host-mode script's own process when the
backend is this machine (herald/_sandbox/child/selfserve.py). The types are the wire's
(herald/_sandbox/wire/grant.py); runtime/backend_tools.py sends each run's grant and takes the
records of the calls answered there.

What is granted, given the tools offered to scripts, the settings, the Gate's roots and what the
backend offers:
- A tool is answered next to the script only when it is the registered tool itself (a registry
  that replaces `read_file` keeps its own handler, in Herald), no rule names it, and it does not
  change files under the read-only profile (Herald decides those). Host mode (`visible` given)
  answers only the reads (`read_file`).
- Nothing is granted to a run with a byte or time budget (Herald keeps those: HERALD_KEPT_BUDGETS).
- `terminal` only with a session shell to share (its state and directory), and not when Herald's
  output cap is larger than what the supervisor's shell keeps (MAX_SHARED_OUTPUT_BYTES).
- The roots: under a confining profile the workspace, on the local backend the masks (Herald's
  files, credential stores) whatever the profile, as the Gate gives them to Herald's own calls. A
  call whose path lies out of them as written, or whose opened file does (links followed, checked
  on the descriptor: _sandbox/toolcore/callroots.py), is handed to Herald, whose Gate refuses it in
  its words. In host mode the roots are cut to the paths the script's process sees as Herald does
  (`visible`), and what its isolation hides (`masked`) is never answered there.

Why it is safe: the script runs in the backend too, where `open()` already reads and writes what
these tools do (and `subprocess` runs what terminal and search_files run), so answering them there
gives it nothing new; every other tool (web, browser, MCP, anything with secrets) still goes to
Herald's Dispatcher. The budget is kept by both sides, so a forged record only uses up its own run's.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .._sandbox.child.selfserve import READ_TOOLS
from .._sandbox.wire.grant import SearchGrant, ShellGrant, ToolGrant, ToolSpec
from ..backends.base import SharedShell
from ..tools import files, search, terminal
from ..tools.context import ToolContext
from ..tools.registry import Tool
from .policy import FULL, READ_ONLY, Gate

# Budgets the side of the script does not keep: a run with one of them has its calls served by Herald.
HERALD_KEPT_BUDGETS = frozenset({"reply_bytes", "tool_seconds", "bytes_written"})
# The tools the sandbox package's core can run (textfiles.py, localshell.py, search.py), by handler.
LOCAL_HANDLERS = {
    "read_file": files.read_file, "write_file": files.write_file, "patch": files.patch, "terminal": terminal.terminal,
    "search_files": search.search_files,
}
# The supervisor's shell keeps 8 MiB of a command's output for Herald (localshell.py): a larger
# cap than this keeps terminal with Herald.
MAX_SHARED_OUTPUT_BYTES = 4 << 20


@dataclass(frozen=True)
class RunLimits:
    """What a grant reads of its run (runtime/scope.py CallScope)."""

    calls_left: int
    deadline: float | None  # time.monotonic() at which the run is stopped
    budgets: Collection[str] = ()  # the names of its other budgets (budgets.py)


class ToolGrants:
    """The grants of one session's runs: the tools that may be answered next to its scripts (fixed
    for the session) and, per run, what they are granted."""

    def __init__(self, tools: Sequence[Tool], gate: Gate, ctx: ToolContext,
                 visible: Sequence[str] | None = None, masked: Sequence[str] = ()) -> None:
        self._allowed = [tool.name for tool in tools]  # a grant's count of calls must match Herald's
        self._gate, self._ctx = gate, ctx
        policy = gate.policy
        # Host mode: the "/dir/" prefixes the script's process sees as Herald does, but for those
        # its isolation hides (Herald's data, credential stores: the script may have its own there).
        self._visible = None if visible is None else tuple(_prefix(p) for p in visible)
        self._masked = [_prefix(p) for p in masked]
        self.specs: dict[str, ToolSpec] = {
            tool.name: {
                # What binding reads (toolcore.bind_arguments): the descriptions stay here.
                "properties": {name: {k: v for k, v in schema.items() if k != "description"}
                               for name, schema in tool.properties.items()},
                "required": list(tool.required),
                "refused": dict(tool.script_refused_args),
                "writes": tool.mutates,
            }
            for tool in tools
            if LOCAL_HANDLERS.get(tool.name) is tool.handler
            and (self._visible is None or tool.name in READ_TOOLS)
            and not any(rule.covers_tool(tool.name) for rule in policy.rules)
            and not (policy.profile == READ_ONLY and tool.mutates)
        }

    @property
    def confined(self) -> bool:
        """Whether grants carry the workspace's roots (the Gate's workspace is needed)."""
        return self._gate.policy.profile != FULL

    def session_shell(self) -> SharedShell | None:
        return self._ctx.backend.session_shell

    def grant(self, run: RunLimits) -> ToolGrant | None:
        """The "tools" of a start or code frame for `run`; None when nothing is answered beside it."""
        if not self.specs or not HERALD_KEPT_BUDGETS.isdisjoint(run.budgets):
            return None
        local, shell = list(self.specs), None
        if "terminal" in local:
            shell = self._shell_grant(run)
            if shell is None:  # no session shell yet: Herald's starts it, later runs share it
                local.remove("terminal")
        grant: ToolGrant = {
            "allowed": list(self._allowed),
            "local": local,  # names: their schemas travel apart (specs)
            "max_calls": run.calls_left,
            "cwd": self._ctx.backend.cwd,
            "files": files.file_limits(self._ctx),
        }
        if shell is not None:
            grant["shell"] = shell
        if "search_files" in local:
            grant["search"] = self._search_grant(run)
        if self.confined or self._ctx.backend.name == "local":
            # The call's confinement as the Gate gives it to Herald's own calls.
            workspace = self._gate.workspace
            grant["roots"] = (workspace.confined if self.confined else workspace.masks_only).wire()
        if self._visible is not None:
            roots = grant["roots"]
            for kind in ("write", "read"):
                roots[kind] = _overlap(roots[kind], self._visible)
            # What the isolation hides, the script's process sees its own of: never answered
            # there, whatever a setting lifts for Herald.
            roots["masked"] = sorted({*roots.get("masked", []), *self._masked})
            hidden = tuple(self._masked)
            roots["unmasked"] = [p for p in roots.get("unmasked", []) if not p.startswith(hidden)]
            roots["unmasked_read"] = [p for p in roots.get("unmasked_read", []) if not p.startswith(hidden)]
        return grant

    def _shell_grant(self, run: RunLimits) -> ShellGrant | None:
        """What the supervisor's shell needs to be the session's (localshell.py)."""
        shell = self.session_shell()
        if shell is None or shell.max_output_bytes > MAX_SHARED_OUTPUT_BYTES:
            return None
        settings = self._ctx.settings.terminal
        return {
            "state_path": shell.state_path, "cwd": shell.cwd, "has_state": True, "bin": settings.shell,
            "max_output_bytes": shell.max_output_bytes, "timeout": settings.timeout, "time_left": _left(run),
        }

    def _search_grant(self, run: RunLimits) -> SearchGrant:
        """What search_files' place in the supervisor reads where Herald's reads its settings
        (beside/searchplace.py): ripgrep's output is captured up to the session shell's cap."""
        settings = self._ctx.settings
        shell = self.session_shell()
        return {
            "python_only": settings.files.search == "python",
            "bin": settings.terminal.shell,
            "max_output_bytes": shell.max_output_bytes if shell is not None else settings.terminal.max_output_bytes,
            "timeout": settings.terminal.timeout,
            "time_left": _left(run),
        }


def _left(run: RunLimits) -> float | None:
    return None if run.deadline is None else max(0.0, run.deadline - time.monotonic())


def _prefix(path: str) -> str:
    return path.rstrip("/") + "/"


def _overlap(allowed: Sequence[str], visible: Sequence[str]) -> list[str]:
    """The "/dir/" prefixes inside both sets: of each pair that nests, the deeper one."""
    return sorted({a if a.startswith(v) else v for a in allowed for v in visible if a.startswith(v) or v.startswith(a)})
