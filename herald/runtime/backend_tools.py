"""The tools answered next to the script, in the backend: by a backend-mode run's supervisor,
or by a host-mode script's own process when the backend is this machine.

`BackendTools` writes each run's grant (see herald/_sandbox/beside/localtools.py for what the
supervisor does with it, selfserve.py for the script's process) and takes the records of the
calls answered there. A tool runs in the backend only when the session offers it to scripts and
it is the registered tool itself (a registry that replaces `read_file` keeps its own handler, in
Herald); `sandbox.backend_tools` False sends every call back to Herald.

Host mode with the local backend (`visible` given): only the reads (`read_file`) are answered by
the script's process, and only under the paths it sees as Herald does (`visible`: the workspace
and the other binds of its isolation, or "/" without a mount namespace), cut to what the policy
lets the tool read: the grant always carries those roots. Inside them, what the process could
not read as Herald would (a masked credential file, a file its isolation cannot open) makes an
error there, and every error goes to Herald, which answers in its own words. Herald tells the
script's side when the session's directory moves, with the reply of the call that moved it
(`cwd_frame`).

The policy (herald/policy/) travels in the grant as far as the supervisor can apply it with the
same outcome: a tool that a rule names, a changing tool under the read-only profile, and every
file tool when the run has a byte or time budget are not granted (Herald decides them); under
a confining profile the grant carries the workspace roots, and on the local backend the masks
(Herald's files, credential stores) whatever the profile; a call whose path lies out of them as
written, or whose opened file does (links followed, checked on the descriptor after the call's
turn came: _sandbox/toolcore/callroots.py), is handed to Herald, whose Gate refuses it in its words.

Why it is safe: the script runs in the backend too, where `open()` already reads and writes
what these tools do (and `subprocess` runs what terminal and search_files run), so answering
them there gives it nothing new; every other tool (web, browser, MCP, anything with secrets)
still comes back to Herald and its Dispatcher. The budget is kept by both sides (the supervisor
counts every call; Herald counts the calls it serves and the records), so a forged record can
only use up the run's own budget.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any

from .._sandbox.child.selfserve import READ_TOOLS
from .._sandbox.shell.localshell import reply as terminal_reply
from .._sandbox.toolcore.base import preview
from .._sandbox.wire import frames
from .._sandbox.wire import guards as wire
from .._sandbox.wire.framing import encode_frame
from .._sandbox.wire.grant import SearchGrant, ShellGrant, ToolGrant, ToolSpec
from ..backends.shell import PersistentShell
from ..capture import CappedCapture
from ..policy import FULL, READ_ONLY
from ..tools import files, search, terminal
from .calls import Answered, recorded_call
from .dispatcher import Dispatcher
from .scope import CallScope
from .tokens import Grant

# Budgets the supervisor does not keep: a run with one of them has its file calls served by Herald.
HERALD_KEPT_BUDGETS = frozenset({"reply_bytes", "tool_seconds", "bytes_written"})
# The tools the supervisor can run (the sandbox package's tool core: textfiles.py, localshell.py,
# search.py), by handler.
LOCAL_HANDLERS = {
    "read_file": files.read_file, "write_file": files.write_file, "patch": files.patch, "terminal": terminal.terminal,
    "search_files": search.search_files,
}
# The supervisor's shell keeps 8 MiB of a command's output for Herald (localshell.py): a larger
# cap than this keeps terminal with Herald.
MAX_SHARED_OUTPUT_BYTES = 4 << 20
log = logging.getLogger(__name__)


class BackendTools:
    """Grants and records of one Runtime's runs, for the calls answered next to their scripts."""

    def __init__(
        self, dispatcher: Dispatcher, visible: Sequence[str] | None = None, masked: Sequence[str] = ()
    ) -> None:
        self._dispatcher = dispatcher
        tools = dispatcher.script_tools
        policy = dispatcher.policy
        # Host mode: the "/dir/" prefixes the script's process sees as Herald does, but for those
        # its isolation hides (Herald's data, credential stores: the script may have its own there).
        self._visible = None if visible is None else tuple(_prefix(p) for p in visible)
        self._masked = [_prefix(p) for p in masked]
        self._local: dict[str, ToolSpec] = {
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
    def names(self) -> list[str]:
        """The tools answered in the backend."""
        return sorted(self._local)

    def specs(self) -> dict[str, ToolSpec]:
        """Their schemas: they travel once per supervisor (its prepare frame), not in each grant."""
        return self._local

    def cwd(self) -> str:
        return self._dispatcher.ctx.backend.cwd

    def prefetch(self) -> None:
        """Have now what the first grant needs from the backend, while the sandbox is set up:
        where the workspace roots lead (on SSH an SFTP session and a REALPATH, four round
        trips), and on a backend whose session shell starts with its first command (Docker,
        Modal), that shell, so that the first run's terminal calls run in the supervisor as
        the session's. A failure is left for the run's own calls to meet and report."""
        backend = self._dispatcher.ctx.backend
        try:
            if "terminal" in self._local and hasattr(backend, "session_shell") and self._session_shell() is None:
                backend.run("true")
            if self._local and self._dispatcher.policy.profile != FULL:
                _ = self._dispatcher.gate.workspace
        except Exception as exc:  # the grant asks again, and says what failed
            log.debug("could not learn ahead of the first run what its grant needs: %s", exc)

    def grant(self, session: Grant) -> ToolGrant | None:
        """The "tools" of a start or code frame for the run `session` is bound to: the one place
        a grant is decided (what each side does with it: _sandbox/wire/grant.py)."""
        scope = session.scope
        if not self._local or _herald_keeps_budgets(scope):
            return None
        local, shell = list(self._local), None
        if "terminal" in local:
            shell = self._shell_grant(scope)
            if shell is None:  # no session shell yet: Herald's starts it, later runs share it
                local.remove("terminal")
        grant: ToolGrant = {
            "allowed": [tool.name for tool in self._dispatcher.script_tools],  # its count must match Herald's
            "local": local,  # names: their schemas went with the prepare frame (specs)
            "max_calls": scope.budget.left,
            "cwd": self.cwd(),
            "files": files.file_limits(self._dispatcher.ctx),
        }
        if shell is not None:
            grant["shell"] = shell
        if "search_files" in local:
            grant["search"] = self._search_grant(scope)
        confined = self._dispatcher.policy.profile != FULL
        if confined or self._dispatcher.ctx.backend.name == "local":
            # The call's confinement as the Gate gives it to Herald's own calls: the workspace
            # (confining profiles) and, on this machine, the masks.
            workspace = self._dispatcher.gate.workspace
            grant["roots"] = (workspace.confined if confined else workspace.masks_only).wire()
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
            session.cwd_told = grant["cwd"]
        return grant

    def cwd_frame(self, session: Grant) -> bytes:
        """Host mode, after Herald served one of the script's calls: a CWD frame to send just
        before its reply when the session's directory moved since the script's side was told
        (a `terminal('cd ...')`), else nothing."""
        told = session.cwd_told
        if told is None:
            return b""
        cwd = self.cwd()
        if cwd == told:
            return b""
        session.cwd_told = cwd
        moved: frames.CwdFrame = {"type": frames.CWD, "cwd": cwd}
        return encode_frame(moved)

    def _session_shell(self) -> PersistentShell | None:
        shell = getattr(self._dispatcher.ctx.backend, "session_shell", None)
        return shell if isinstance(shell, PersistentShell) else None

    def _shell_grant(self, scope: CallScope) -> ShellGrant | None:
        """What the supervisor's shell needs to be the session's (localshell.py)."""
        shell = self._session_shell()
        if shell is None or shell.max_output_bytes > MAX_SHARED_OUTPUT_BYTES:
            return None
        settings = self._dispatcher.ctx.settings.terminal
        left = None if scope.deadline is None else max(0.0, scope.deadline - time.monotonic())
        return {
            "state_path": shell.state_path, "cwd": shell.cwd, "has_state": True, "bin": settings.shell,
            "max_output_bytes": shell.max_output_bytes, "timeout": settings.timeout, "time_left": left,
        }

    def _search_grant(self, scope: CallScope) -> SearchGrant:
        """What search_files' place in the supervisor reads where Herald's reads its settings
        (herald/_sandbox/beside/searchplace.py): ripgrep's output is captured up to the session shell's cap."""
        settings = self._dispatcher.ctx.settings
        shell = self._session_shell()
        return {
            "python_only": settings.files.search == "python",
            "bin": settings.terminal.shell,
            "max_output_bytes": shell.max_output_bytes if shell is not None else settings.terminal.max_output_bytes,
            "timeout": settings.terminal.timeout,
            "time_left": None if scope.deadline is None else max(0.0, scope.deadline - time.monotonic()),
        }

    def follow(self, cwd: Any) -> None:
        """The supervisor's shell ran a command: the session's shell takes up its state and cwd."""
        shell = self._session_shell()
        if shell is not None and isinstance(cwd, str) and cwd.startswith("/"):
            shell.follow(cwd)

    def ran(self, session: Grant, message: frames.CallFrame) -> dict[str, Any]:
        """A terminal call the supervisor ran whose output passed the cap: capped and spilled
        here, as Herald's own shell does, counted and logged; the reply for the script."""
        ran: Any = message["ran"]  # decoded as the supervisor sent it: a malformed one raises
        started = time.perf_counter()
        settings = self._dispatcher.ctx.settings
        shell = self._session_shell()
        capture = CappedCapture(
            shell.max_output_bytes if shell is not None else settings.terminal.max_output_bytes,
            spill_dir=settings.spill_dir,
            spill_name=f"terminal-{secrets.token_hex(8)}.txt",
        )
        try:
            capture.feed(str(ran["output"]).encode("latin-1", "replace"))
            capture.skip(int(ran.get("skipped", 0)))
            capture.feed(str(ran.get("tail", "")).encode("latin-1", "replace"))
        finally:
            capture.close()
        output = capture.text("command output").replace(f"{ran['command_path']}: ", "bash: ")
        result = terminal_reply(
            output, int(ran["exit_code"]), bool(ran["timed_out"]), capture.overflowed, str(ran["note"])
        )
        self.follow(ran.get("cwd"))
        answered = Answered(None, len(output), time.perf_counter() - started, in_script=False)
        self._dispatcher.handle(recorded_call(session.scope, "terminal", preview(message.get("args")), answered))
        return {"result": result}

    def record(self, session: Grant, message: frames.RecordFrame) -> None:
        """A call answered next to the script: count it in the run and write it to the transcript."""
        try:  # its reader checked it (wire.from_child, from_supervisor); a caller may not have
            record: frames.RecordFrame | None = wire.record(message)
        except wire.FrameError:
            record = None
        if record is None or record["tool"] not in self._local:
            # In host mode the script itself writes these: a hostile one must not flood the log.
            (log.debug if self._visible is not None else log.warning)(
                "ignored a malformed record from the %s: %.200r", self._answerer, message)
            return
        in_script = self._visible is not None
        if in_script and session.scope.budget.spent:
            # The script's side never answers past its budget, so this one is made up: a script
            # writing records in a loop must not grow the transcript without end.
            log.debug("dropped a record past the run's budget from the script's process")
            return
        tool, error = record["tool"], record.get("error")
        if tool == "terminal":
            self.follow(record.get("cwd"))
        args = record.get("args")
        answered = Answered(error, record["reply_bytes"], float(record["duration_ms"]) / 1000, in_script)
        self._dispatcher.handle(recorded_call(session.scope, tool, preview(args) if in_script else args, answered))

    @property
    def _answerer(self) -> str:
        return "backend's supervisor" if self._visible is None else "script's process"


def _herald_keeps_budgets(scope: CallScope) -> bool:
    return scope.budgets is not None and not HERALD_KEPT_BUDGETS.isdisjoint(scope.budgets.limits)


def _prefix(path: str) -> str:
    return path.rstrip("/") + "/"


def _overlap(allowed: Sequence[str], visible: Sequence[str]) -> list[str]:
    """The "/dir/" prefixes inside both sets: of each pair that nests, the deeper one."""
    return sorted({a if a.startswith(v) else v for a in allowed for v in visible if a.startswith(v) or v.startswith(a)})
