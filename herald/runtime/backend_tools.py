"""The tools answered next to the script, in the backend: by a backend-mode run's supervisor,
or by a host-mode script's own process when the backend is this machine. The plumbing only:
what is granted, and why that is safe, the policy decides (herald/policy/grant.py `ToolGrants`).

`BackendTools` sends each run's grant (see herald/_sandbox/beside/localtools.py for what the
supervisor does with it, selfserve.py for the script's process) and takes the records of the
calls answered there, which go through the Dispatcher as `record` calls (calls.py): counted in
the run and logged. `sandbox.backend_tools` False makes none (runtime.py). Herald tells the
script's side when the session's directory moves, with the reply of the call that moved it
(`cwd_frame`, host mode), and the session shell takes up what the supervisor's shell did (`follow`).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any

from .._sandbox.shell.localshell import reply as terminal_reply
from .._sandbox.toolcore.base import preview
from .._sandbox.wire import frames
from .._sandbox.wire import guards as wire
from .._sandbox.wire.framing import encode_frame
from .._sandbox.wire.grant import ToolGrant, ToolSpec
from ..capture import CappedCapture
from ..policy.grant import RunLimits, ToolGrants
from .calls import Answered, recorded_call
from .dispatcher import Dispatcher
from .tokens import RunToken

log = logging.getLogger(__name__)


class BackendTools:
    """Tool grants and records of one Runtime's runs, for the calls answered next to their scripts."""

    def __init__(
        self, dispatcher: Dispatcher, visible: Sequence[str] | None = None, masked: Sequence[str] = ()
    ) -> None:
        self._dispatcher = dispatcher
        self._host_mode = visible is not None  # answered by the script's own process
        self._grants = ToolGrants(dispatcher.script_tools, dispatcher.gate, dispatcher.ctx, visible, masked)

    @property
    def names(self) -> list[str]:
        """The tools answered in the backend."""
        return sorted(self._grants.specs)

    def specs(self) -> dict[str, ToolSpec]:
        """Their schemas: they travel once per supervisor (its prepare frame), not in each grant."""
        return self._grants.specs

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
            specs = self._grants.specs
            if "terminal" in specs and self._grants.session_shell() is None:
                backend.run("true")
            if specs and self._grants.confined:
                _ = self._dispatcher.gate.workspace
        except Exception as exc:  # the grant asks again, and says what failed
            log.debug("could not learn ahead of the first run what its grant needs: %s", exc)

    def grant(self, session: RunToken) -> ToolGrant | None:
        """The "tools" of a start or code frame for the run `session` is bound to (ToolGrants)."""
        scope = session.scope
        budgets = scope.budgets.limits if scope.budgets is not None else ()
        grant = self._grants.grant(RunLimits(scope.budget.left, scope.deadline, budgets))
        if grant is not None and self._host_mode:
            session.cwd_told = grant["cwd"]
        return grant

    def cwd_frame(self, session: RunToken) -> bytes:
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

    def follow(self, cwd: Any) -> None:
        """The supervisor's shell ran a command: the session's shell takes up its state and cwd."""
        shell = self._grants.session_shell()
        if shell is not None and isinstance(cwd, str) and cwd.startswith("/"):
            shell.follow(cwd)

    def ran(self, session: RunToken, message: frames.CallFrame) -> dict[str, Any]:
        """A terminal call the supervisor ran whose output passed the cap: capped and spilled
        here, as Herald's own shell does, counted and logged; the reply for the script."""
        ran: Any = message["ran"]  # decoded as the supervisor sent it: a malformed one raises
        started = time.perf_counter()
        settings = self._dispatcher.ctx.settings
        shell = self._grants.session_shell()
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

    def record(self, session: RunToken, message: frames.RecordFrame) -> None:
        """A call answered next to the script: count it in the run and write it to the transcript."""
        try:  # its reader checked it (wire.from_child, from_supervisor); a caller may not have
            record: frames.RecordFrame | None = wire.record(message)
        except wire.FrameError:
            record = None
        if record is None or record["tool"] not in self._grants.specs:
            # In host mode the script itself writes these: a hostile one must not flood the log.
            (log.debug if self._host_mode else log.warning)(
                "ignored a malformed record from the %s: %.200r", self._answerer, message)
            return
        in_script = self._host_mode
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
        return "script's process" if self._host_mode else "backend's supervisor"
