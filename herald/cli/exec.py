"""`herald exec SCRIPT`: run one script against a backend and show it as it runs.

Exit codes: 0 success, 1 error, 124 timeout, 130/143/129 stopped by SIGINT/SIGTERM/SIGHUP,
2 bad usage (an unreadable script, an unknown tool, a bad setting).

Output: the script's stdout and stderr are passed through as they are produced (the script's
streams are line-buffered), with a status line on a terminal; then Herald's own notes and a
one-line summary on stderr. `--json` prints the result object at the end instead; `--events` adds
one JSON line per tool call and output chunk before it.

Approvals: a call an `ask` rule stops is asked about on the terminal (policy/approvals.py) when
stdin is one and CI is not set; otherwise it is refused with a message naming the rule.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends.base import Backend
from ..deadlines import call_deadline
from .common import (
    UsageError,
    add_runtime_options,
    connect_backend,
    console,
    ensure_data_dir,
    escape,
    import_rich_meanwhile,
    load,
    new_backend,
    runtime_flags,
)
from .live import EventStream, LiveView
from .replay import add_exec_options, finish_recording, open_recorder, read, replay_run, replay_verdict, start_recording
from .signals import stop_signals

if TYPE_CHECKING:
    from ..config import Settings
    from ..policy.approvals import TerminalApprovals
    from ..runtime import Runtime
    from ..runtime.sandbox.result import ExecutionResult

EXIT_CODES = {"success": 0, "error": 1, "timeout": 124, "interrupted": 130}


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]
) -> None:
    p = sub.add_parser("exec", parents=parents, help="run a Python script that calls Herald's tools")
    p.add_argument("script", help="path of the script, or - for stdin")
    add_runtime_options(p)
    p.add_argument("--json", action="store_true", help="print the whole result object as JSON at the end")
    p.add_argument("--events", action="store_true",
                   help="with --json: first one JSON line per tool call and output chunk, as they happen")
    add_exec_options(p)
    p.set_defaults(func=cmd_exec)


def read_script(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    if path.is_dir():
        raise UsageError(f"{source} is a directory: pass a Python file, or - to read the script from stdin")
    if not path.is_file():
        raise UsageError(f"script {source} not found (pass a Python file, or - to read from stdin)")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read script {source}: {exc}") from None


class ConnectTimeout(Exception):
    """The backend was still connecting when the run's time was up."""


class Opening:
    """A backend being connected on a helper thread: connecting a remote one is mostly waiting
    for the network, which the caller spends importing the runtime instead (about a tenth of a
    cold `herald exec` on SSH). `take` waits for it and raises what connecting raised;
    `abandon` (the caller gives up) closes it, now or once it is connected."""

    def __init__(self, backend: Backend, connect: Callable[[], None]) -> None:
        self._candidate = backend
        self._connect = connect
        self._lock = threading.Lock()
        self._backend: Backend | None = None
        self._error: BaseException | None = None
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="herald-connect", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backend = self._candidate
        try:
            self._connect()
        except BaseException as exc:  # raised again by take(), on the caller's thread (closed already)
            self._error = exc
            return
        with self._lock:
            if not self._abandoned:
                self._backend = backend
                return
        backend.close()

    def take(self, timeout: float | None = None) -> Backend:
        """The connected backend; ConnectTimeout when it is still connecting after `timeout` s."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise ConnectTimeout()
        if self._error is not None:
            raise self._error
        assert self._backend is not None
        return self._backend

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()


def cmd_exec(args: argparse.Namespace) -> int:
    # The run's clock starts now: its stubs, MCP listings, the backend's connection and set-up
    # all count against --timeout, and the result's duration is the time herald exec took.
    started = time.monotonic()
    if args.events and not args.json:
        raise UsageError("--events goes with --json (the events are JSON lines before the result object)")
    code = read_script(args.script)
    if args.replay is not None:  # the calls answered from a recording: no backend (cli/replay.py)
        if args.record is not None:
            raise UsageError("--record and --replay go separately: replay a recording, or record a run")
        return replay_exec(args, code, started)
    recorder, settings = open_recorder(args, _one_run_settings(args))
    deadline = started + settings.sandbox.timeout
    with stop_signals() as stop:
        # Made here (its modules imported: paramiko is a good part of them), connected meanwhile.
        made = new_backend(settings.backend, settings, args.cwd)
        opening = Opening(made, lambda: connect_backend(made, args.cwd))
        approvals: TerminalApprovals | None = None
        runtime: Runtime | None = None
        try:
            from ..policy import Policy
            from ..policy.approvals import interrupting, terminal_approvals
            from ..runtime import Runtime
            from ..runtime.sandbox.errors import SandboxStartError

            approvals = terminal_approvals()
            # Made while the connection is: it needs none before its first run (in backend mode
            # its start includes the archive of the sandbox files), so that work fills the wait.
            try:
                policy = Policy.from_settings(settings, approve=approvals)
                with call_deadline(deadline):  # an MCP server's listing ends by the run's deadline
                    runtime = Runtime(made, settings=settings, policy=policy)
            except (ValueError, SandboxStartError) as exc:  # unknown tool names; no python in the backend
                raise UsageError(str(exc)) from None
            if recorder is not None:
                start_recording(recorder, runtime, code)
            runtime.dispatcher.warmer.script_starts(code)  # a browser it names starts while the backend connects
            backend = opening.take(max(0.0, deadline - time.monotonic()) + settings.sandbox.kill_grace)
        except ConnectTimeout:  # the run's time was up before the backend was connected
            from ..runtime.outcome import not_connected

            _give_up(runtime, approvals, opening)
            return _report(args, not_connected(settings.backend, settings.sandbox.timeout, started), 124)
        except BaseException:  # a stop signal meanwhile, a bad setting, or opening failed
            _give_up(runtime, approvals, opening)  # (opening failed: nothing to close)
            raise
        try:
            with runtime:
                view = _view(args, runtime, approvals)
                stop.interrupt = interrupting(runtime.interrupt, approvals)
                if not args.json:
                    import_rich_meanwhile()  # for the summary line at the end
                try:
                    setup = time.monotonic() - started
                    result = runtime.execute(code, on_output=view.output if view is not None else None,
                                             started=started)
                    result = _with_start_notes(result, runtime, setup)
                    if recorder is not None:
                        result = finish_recording(recorder, result)
                except SandboxStartError as exc:
                    raise UsageError(str(exc)) from None
                finally:
                    stop.interrupt = _ignore  # from here on a signal must not break the clean-up
                    if approvals is not None:
                        approvals.close()  # a question still on screen (a call of a killed script): denied
                    if isinstance(view, LiveView):
                        view.close()
        finally:
            backend.close()
    exit_code = stop.exit_code if result.status == "interrupted" and stop.exit_code else EXIT_CODES[result.status]
    return _report(args, result, exit_code)


def replay_exec(args: argparse.Namespace, code: str, started: float) -> int:
    """`herald exec SCRIPT --replay FILE` (cli/replay.py)."""
    recording = read(Path(args.replay))
    result, player, stopped = replay_run(args, recording, code, started, lambda runtime: _view(args, runtime, None))
    result, exit_code = replay_verdict(args, result, player, stopped or EXIT_CODES[result.status])
    return _report(args, result, exit_code)


def _one_run_settings(args: argparse.Namespace) -> Settings:
    """The settings of `herald exec`, its data directory made."""
    settings = load(args, runtime_flags(args))
    if settings.sandbox.exec_mode == "backend":
        # One script, then the process ends. An interpreter made ready for a next run, or a
        # fork server in the backend (which is ready only after this run's script has been
        # spawned), would only start there, competing with this run for the backend's CPU, to
        # be stopped again at close.
        settings = settings.with_overrides({"sandbox.warm": False, "sandbox.fork_server": False})
    ensure_data_dir(settings)
    return settings


def _give_up(runtime: Runtime | None, approvals: TerminalApprovals | None, opening: Opening) -> None:
    """Before the run: close what was made, and the backend once it is connected."""
    if runtime is not None:
        runtime.close()
    if approvals is not None:
        approvals.close()
    opening.abandon()


def _view(
    args: argparse.Namespace, runtime: Runtime, approvals: TerminalApprovals | None
) -> LiveView | EventStream | None:
    """What shows the run: the live view on a terminal, JSON events with --events, else nothing."""
    view: LiveView | EventStream | None
    if args.json:
        view = EventStream() if args.events else None
    else:
        view = LiveView(status_line=sys.stderr.isatty(), profile=runtime.dispatcher.policy.profile)
    if view is not None:
        runtime.dispatcher.on_script_call = view.tool_call
    if approvals is not None and isinstance(view, LiveView):
        approvals.pause = view.suspended  # a question asked while the view draws pauses it
    return view


def _report(args: argparse.Namespace, result: ExecutionResult, exit_code: int) -> int:
    if args.json:
        text = json.dumps(result.to_dict(), ensure_ascii=False, indent=None if args.events else 2)
        print(text, flush=True)
        return exit_code
    _summarise(result)
    return exit_code


def _with_start_notes(result: ExecutionResult, runtime: Runtime, setup: float) -> ExecutionResult:
    """`result` with what its start cost said: MCP servers whose tools are withheld (and why),
    and, for a run that timed out, the seconds spent before the script started."""
    notes = [f"{name}: {reason}" for name, reason in runtime.dispatcher.offer.withheld.items()
             if name.startswith("mcp_") and reason.startswith("MCP server ")]
    if result.status == "timeout" and setup >= 0.5:
        notes.append(f"{setup:.1f} s of the run's time went to starting it (MCP servers' listings, the backend) "
                     "before the script started.")
    if not notes:
        return result
    return replace(result, notes=[*result.notes, *notes], error="\n".join([result.error.rstrip("\n"), *notes]).strip())


def _ignore() -> None:
    pass


def _summarise(result: ExecutionResult) -> None:
    """Herald's notes and the one-line summary, after the output already shown live."""
    err = console(stderr=True)
    for note in result.notes:
        err.print(escape(note), style="yellow" if result.ok else "red")
    style = "green" if result.ok else "red"
    profile = f" · profile {result.profile}" if result.profile and result.profile != "workspace-write" else ""
    refused = f" ([red]{result.refused_calls} refused[/])" if result.refused_calls else ""
    line = (f"[{style}]{result.status}[/]{profile} · exit {result.exit_code} · {result.tool_calls_made} tool call(s)"
            f"{refused} · {result.duration_seconds:.2f} s")
    if result.output_spill_path:
        line += f" · full output: {escape(result.output_spill_path)}"
    if result.error_spill_path:
        line += f" · full stderr: {escape(result.error_spill_path)}"
    err.print(line, style="dim")
