"""Record and replay on the command line (herald/runtime/replay/ does the work):

    herald exec script.py --record run.jsonl       every tool call and its outcome kept
    herald exec script.py --replay run.jsonl       the calls answered from it: no backend opened
    herald replay SESSION [--run N]                an agent session's execute_code run again,
                                                   and whether its output is what the session got

A replay runs the script on this machine (host mode, local backend in --cwd, isolation as set)
with every tool call answered from the recording, so nothing reaches the recorded backend, a
browser or the network. The first call that matches no recorded call fails there (the script
gets a ToolError saying which; herald exits 1 with that message); recorded calls the run did
not make are a note, an error with --strict. A recording that is cut or damaged is refused
before anything runs (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import UsageError, ensure_data_dir, load, open_backend, runtime_flags
from .signals import stop_signals

if TYPE_CHECKING:
    from ..config import Settings
    from ..runtime.replay import Player, Recorder, Recording
    from ..runtime.runtime import Runtime
    from ..runtime.sandbox.result import ExecutionResult

# What shows a run (exec.py `_view`): something with `output`, and maybe `close`.
MakeView = Callable[["Runtime"], Any]
END_FIELDS = ("status", "exit_code", "tool_calls_made", "refused_calls", "output")


def add_exec_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--record", metavar="FILE",
                        help="keep every tool call, its arguments and its result in FILE (JSON lines)")
    parser.add_argument("--replay", metavar="FILE",
                        help="answer the script's tool calls from FILE, made by --record: no backend is opened")
    parser.add_argument("--strict", action="store_true",
                        help="with --replay: fail when the script does not make every recorded call")


# -- recording ------------------------------------------------------------------------------

def open_recorder(args: argparse.Namespace, settings: Settings) -> tuple[Recorder | None, Settings]:
    """`--record FILE`: the file opened now (an unwritable place is bad usage: nothing has run),
    and the settings that bring every call to Herald."""
    if args.record is None:
        return None, settings
    from ..runtime.replay import RECORDING_SETTINGS, Recorder

    if args.replay is not None:
        raise UsageError("--record and --replay go separately: replay a recording, or record a run")
    try:
        recorder = Recorder(Path(args.record))
    except OSError as exc:
        raise UsageError(f"cannot write the recording {args.record}: {exc.strerror or exc}") from None
    return recorder, settings.with_overrides(RECORDING_SETTINGS)


def start_recording(recorder: Recorder, runtime: Runtime, code: str) -> None:
    from ..runtime.replay.format import header

    settings = runtime.settings
    recorder.start(header(code, backend=settings.backend or "local", exec_mode=runtime.exec_mode,
                          tools=[t.name for t in runtime.dispatcher.script_tools],
                          max_tool_calls=settings.sandbox.max_tool_calls))
    runtime.dispatcher.tap = recorder


def finish_recording(recorder: Recorder, result: ExecutionResult) -> ExecutionResult:
    """The end line written and the file closed; a failure to write is a note of the result."""
    problem = recorder.close(_end(result))
    return result if problem is None else _noted(result, problem)


def _end(result: ExecutionResult) -> dict[str, Any]:
    fields = result.to_dict()
    return {key: fields.get(key) for key in END_FIELDS}


def _noted(result: ExecutionResult, note: str) -> ExecutionResult:
    return replace(result, notes=[*result.notes, note], error="\n".join([result.error.rstrip("\n"), note]).strip())


# -- replaying ------------------------------------------------------------------------------

def read(path: Path) -> Recording:
    from ..runtime.replay import RecordingError, read_recording

    try:
        return read_recording(path)
    except RecordingError as exc:
        raise UsageError(f"{exc} (nothing was run)") from None


def replay_settings(args: argparse.Namespace, recording: Recording) -> Settings:
    """The recorded run's tools and call limit, on this machine, every call to Herald and no
    tool warmed (a browser launched ahead would be the network the replay must not reach)."""
    from ..runtime.replay import RECORDING_SETTINGS

    settings = load(args, runtime_flags(args) if hasattr(args, "timeout") else None)
    limit = recording.header.get("max_tool_calls")
    settings = settings.with_overrides({
        **RECORDING_SETTINGS, "backend": "local", "sandbox.exec_mode": "host", "sandbox.warm": False,
        "sandbox.warm_tools": "off", "browser.cdp_url": "", "tools": recording.tools,
        "sandbox.max_tool_calls": limit if isinstance(limit, int) and limit >= 0 else None,
    }, source="the recording")
    ensure_data_dir(settings)
    return settings


def replay_run(args: argparse.Namespace, recording: Recording, code: str, started: float, make_view: MakeView,
               ) -> tuple[ExecutionResult, Player, int | None]:
    """Run `code` with its calls answered from `recording`, shown by `make_view(runtime)`; the
    result, the player (what matched) and the exit code of a stop signal, if one stopped it."""
    from ..runtime import Runtime
    from ..runtime.replay import Player
    from ..runtime.sandbox.errors import SandboxStartError

    settings = replay_settings(args, recording)
    player = Player(recording, code)
    with stop_signals() as stop:
        backend = open_backend("local", settings, args.cwd)
        try:
            try:
                runtime = Runtime(backend, settings=settings)
            except (ValueError, SandboxStartError) as exc:  # a recorded tool this Herald does not have
                raise UsageError(f"cannot replay {recording.path}: {exc}") from None
            with runtime:
                runtime.dispatcher.tap = player
                view = make_view(runtime)
                stop.interrupt = runtime.interrupt
                try:
                    result = runtime.execute(code, on_output=view.output if view is not None else None,
                                             started=started)
                finally:
                    stop.interrupt = _ignore
                    close = getattr(view, "close", None)
                    if close is not None:
                        close()
        finally:
            backend.close()
    return result, player, stop.exit_code if result.status == "interrupted" else None


def replay_verdict(args: argparse.Namespace, result: ExecutionResult, player: Player,
                   exit_code: int) -> tuple[ExecutionResult, int]:
    """The replay's own notes (a mismatch, unused calls) on the result, and the exit code."""
    if player.mismatch is not None:
        result, exit_code = _noted(result, player.mismatch), exit_code or 1
    unused = player.unused_note() if player.mismatch is None else None
    if unused is not None:
        result = _noted(result, unused + (" (--strict)" if args.strict else ""))
        if args.strict:
            exit_code = exit_code or 1
    return result, exit_code


def _ignore() -> None:
    pass
