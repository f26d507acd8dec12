"""A run's results: where its output goes while it runs (capped captures that spill to a file,
a live listener) and the one ExecutionResult made from it: status, capped text, notes."""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable, Sequence

from ..backends.base import BackendError
from ..capture import CappedCapture
from ..config import Settings
from .sandbox.contract import Collected
from .sandbox.result import ExecutionResult, Status, noted_error
from .scope import CallScope

# on_output(stream, data): "stdout" or "stderr", and the bytes as the script produced them.
OutputListener = Callable[[str, bytes], None]
log = logging.getLogger(__name__)


def capture_streams(
    settings: Settings, scope: CallScope, on_output: OutputListener | None
) -> tuple[CappedCapture, CappedCapture]:
    """The stdout and stderr captures of one run: capped, spilling the rest to a file within
    the run's spill budget, and teed to `on_output` (whose failures are logged, never the run's)."""
    limits, spill = settings.sandbox, settings.spill_dir
    tag = f"{os.getpid()}-{scope.run_id}-{secrets.token_hex(3)}"
    return (
        CappedCapture(limits.max_stdout_bytes, spill_dir=spill, spill_name=f"{tag}-stdout.txt",
                      tee=_listener(on_output, "stdout"), budget=scope.spill),
        CappedCapture(limits.max_stderr_bytes, spill_dir=spill, spill_name=f"{tag}-stderr.txt",
                      tee=_listener(on_output, "stderr"), budget=scope.spill),
    )


def _listener(on_output: OutputListener | None, stream: str) -> Callable[[bytes], None] | None:
    if on_output is None:
        return None

    def tee(data: bytes) -> None:
        try:
            on_output(stream, data)
        except Exception:  # a broken display must not cost the run or its result
            log.exception("on_output listener failed")

    return tee


def build_result(
    collected: Collected,
    scope: CallScope,
    stdout: CappedCapture,
    stderr: CappedCapture,
    started: float,
    timeout: float,
    *,
    session: str | None = None,
    state_lost: bool = False,
    more_notes: Sequence[str] = (),
) -> ExecutionResult:
    """The result of a run that began at `started` (time.monotonic()) with `timeout` seconds;
    `more_notes`: what else Herald did at its end (transactions it rolled back)."""
    notes: list[str] = []
    status: Status
    elapsed = time.monotonic() - started
    if collected.reason == "timeout":
        status = "timeout"
        notes.append(
            f"Timed out after {timeout:g} s: the script and every process it started were "
            "killed. Output printed before that is kept. Make the script do less per run, or "
            "pass a larger timeout."
        )
        if elapsed > timeout + 1:  # the real times, not only the limit's
            late = f"The run ended {elapsed:.1f} s after it began, {elapsed - timeout:.1f} s past its limit"
            notes.append(late + (": the sandbox did not answer the kill (stopped or unresponsive), so Herald "
                                 "ended it by closing its channel." if collected.exit_code is None else "."))
    elif collected.reason == "interrupted":
        status = "interrupted"
        notes.append("Interrupted: the script and every process it started were killed.")
    elif collected.exit_code == 0:
        status = "success"
    elif (deadline := scope.live_deadline()) is not None and time.monotonic() >= deadline:
        # The script failed once its time was up (a tool call stopped at the run's deadline
        # raised in it, say): the run ran out of time, whichever came first, kill or exception.
        status = "timeout"
        notes.append(
            f"Timed out after {timeout:g} s: the run's time was up when the script ended (its last "
            "tool call was stopped at the deadline). Output printed before that is kept. Make the "
            "script do less per run, or pass a larger timeout."
        )
    else:
        status = "error"
        code = collected.exit_code
        if code is not None and code < 0:
            notes.append(f"The script was killed by signal {-code}.")
        elif not stderr.total:
            notes.append(f"The script exited with status {code}.")
    if session is not None and state_lost and collected.reason != "done":
        notes.append(
            f"Kernel session '{session}' was stopped: its state (variables, imports) is lost; "
            "the next run starts fresh."
        )
    elif session is not None and state_lost:
        notes.append(f"Kernel session '{session}' was restarted: earlier state is gone.")
    notes += _refusal_notes(scope)
    notes += more_notes
    if scope.spill is not None and scope.spill.exhausted:
        notes.append(
            f"Spill files of this run reached their cap of {scope.spill.limit:,} bytes "
            "(sandbox.max_spill_bytes): output beyond it was dropped; only the kept head and tail show it."
        )
    error = stderr.text("stderr")
    if notes:
        error = noted_error(error, notes)
    return ExecutionResult(
        status=status,
        output=stdout.text("output"),
        error=error,
        exit_code=collected.exit_code,
        tool_calls_made=scope.calls,
        duration_seconds=round(elapsed, 6),
        output_spill_path=str(stdout.spill_path) if stdout.spill_path else None,
        error_spill_path=str(stderr.spill_path) if stderr.spill_path else None,
        session=session,
        state_lost=state_lost,
        notes=notes,
        budgets=scope.budgets.usage() if scope.budgets is not None else {},
        refused_calls=scope.refused_calls,
        budget_exhausted=bool(scope.refused or (scope.budgets is not None and scope.budgets.exhausted())),
    )


def _refusal_notes(scope: CallScope) -> list[str]:
    """What the run's refused calls mean for its result, one note per cause."""
    notes: list[str] = []
    if scope.refused:
        notes.append(
            f"{scope.refused} tool call(s) were refused: the limit is {scope.max_calls} per run "
            "(sandbox.max_tool_calls, --max-tool-calls). The script's work is incomplete: run the rest "
            "in another script, or raise the limit."
        )
    if scope.budgets is not None and scope.budgets.exhausted():
        count = scope.refusals.get("BudgetExhausted", 0)
        notes.append(f"Budget(s) used up: {', '.join(scope.budgets.exhausted())}; {count} call(s) that needed "
                     "them were refused.")
    if scope.refusals.get("PolicyRefused"):
        notes.append(f"{scope.refusals['PolicyRefused']} tool call(s) were refused by the permission policy "
                     "(each error names the rule or profile).")
    return notes


def unrunnable(code: str, session: str | None) -> ExecutionResult | None:
    """The error result of a script that cannot be run at all (empty, or not valid text), or None."""
    if not code.strip():
        message = "No code to run: the script is empty. Send Python source that prints its result."
    else:
        try:
            code.encode("utf-8")
            return None
        except UnicodeEncodeError as exc:  # Python could not compile it, and the child never sees it
            message = (f"The script is not valid text: {exc.reason} at character {exc.start} "
                       f"({code[exc.start : exc.end]!a}). Write the character itself or an escape such as '\\u00e9'.")
    return ExecutionResult(status="error", output="", error=message, exit_code=None, tool_calls_made=0,
                           duration_seconds=0.0, session=session)


def unreachable(exc: BackendError, session: str | None) -> ExecutionResult:
    """The result of a run that could not start because the backend could not be reached (in
    backend mode): an error result, not an exception, so an agent's run goes on."""
    message = (f"The script did not run: {exc}. Check that the backend is reachable (host up, network, "
               "sshd or the engine running); the next run connects again.")
    return ExecutionResult(status="error", output="", error=message, exit_code=None, tool_calls_made=0,
                           duration_seconds=0.0, session=session)


def not_connected(backend: str, timeout: float, started: float) -> ExecutionResult:
    """The result of a run whose time was up before its backend was connected (herald exec)."""
    elapsed = time.monotonic() - started
    message = (f"Timed out after {timeout:g} s before the script started: the {backend} backend was still being "
               f"connected {elapsed:.1f} s after the run began. Check that it is reachable, or pass a larger timeout.")
    return ExecutionResult(status="timeout", output="", error=message, exit_code=None, tool_calls_made=0,
                           duration_seconds=round(elapsed, 6))
