"""`herald replay SESSION [--run N]`: an agent session's recorded execute_code run again, its
calls answered from its recording (herald/runtime/replay/sessions.py), and whether the replay's
output, status and exit code are what the session got. Exit 0 when they are, 1 when not (or the
replay stopped at a call that matches none), 2 when there is nothing to replay."""

from __future__ import annotations

import argparse
import difflib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import UsageError, console, escape, load
from .exec import _view as view
from .replay import read, replay_run, replay_verdict

if TYPE_CHECKING:
    from ..runtime.sandbox.result import ExecutionResult

COMPARED = ("status", "exit_code", "output")
DIFF_LINES = 40


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]
) -> None:
    p = sub.add_parser("replay", parents=parents,
                       help="run an agent session's execute_code run again with its recorded tool results")
    p.add_argument("session", help="a session id, a unique prefix of one, or 'last'")
    p.add_argument("--run", type=int, help="which of its recorded runs (1 is the first; default: the last)")
    p.add_argument("--cwd", help="the directory the script runs in (default: the current one)")
    p.add_argument("--strict", action="store_true", help="fail when the run does not make every recorded call")
    p.add_argument("--json", action="store_true", help="print the result object and the comparison as JSON")
    p.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    """`herald replay SESSION [--run N]`."""
    from ..agent.sessions import SessionNotFound, find_session

    started = time.monotonic()
    settings = load(args)
    try:
        session = find_session(settings.sessions_dir, args.session).stem
    except SessionNotFound as exc:
        raise UsageError(str(exc)) from None
    return replay_session(args, settings.sessions_dir, session, started)


def replay_session(args: argparse.Namespace, sessions_dir: Path, session: str, started: float) -> int:
    from ..runtime.replay import recorded_runs, run_path

    runs = recorded_runs(sessions_dir, session)
    if not runs:
        raise UsageError(f"session {session} has no recorded runs: a session records its execute_code runs "
                         "when agent.record_runs is on ([agent] record_runs = true, or -c agent.record_runs=true)")
    number = args.run if args.run is not None else runs[-1]
    if number not in runs:
        raise UsageError(f"session {session} has no recorded run {number}: it has {_numbers(runs)}")
    recording = read(run_path(sessions_dir, session, number))
    code = recording.header.get("script")
    if not isinstance(code, str):
        raise UsageError(f"{recording.path} does not hold its script: it is not a session run's recording")
    args.events = False  # the live view, or the JSON object at the end
    result, player, stopped = replay_run(args, recording, code, started, lambda runtime: view(args, runtime, None))
    result, exit_code = replay_verdict(args, result, player, stopped or 0)
    differences = _differences(recording.end, result)
    if differences and not exit_code:
        exit_code = 1
    where = f"run {number} of session {session}"
    if args.json:
        print(json.dumps({"session": session, "run": number, "matches": not differences and player.mismatch is None,
                          "differences": differences, "mismatch": player.mismatch, "recorded": recording.end,
                          "result": result.to_dict()}, ensure_ascii=False, indent=2), flush=True)
        return exit_code
    err = console(stderr=True)
    for note in result.notes:
        err.print(escape(note), style="yellow" if result.ok else "red")
    if player.mismatch is not None:
        err.print(f"[red]replay of {escape(where)} stopped at a call the recording does not have[/]")
    elif differences:
        err.print(f"[red]replay of {escape(where)}: {escape(', '.join(differences))} differ from what the "
                  "session got[/]")
        if "output" in differences:
            err.print(escape(_diff(str(recording.end.get("output") or ""), result.output)), style="dim")
    else:
        err.print(f"[green]replay of {escape(where)}: the output, status and exit code are what the session got[/] "
                  f"({result.tool_calls_made} tool call(s) from the recording, {result.duration_seconds:.2f} s)")
    return exit_code


def _differences(recorded: dict[str, Any], result: ExecutionResult) -> list[str]:
    now = result.to_dict()
    return [key for key in COMPARED if recorded.get(key) != now.get(key)]


def _diff(recorded: str, replayed: str) -> str:
    lines = list(difflib.unified_diff(recorded.splitlines(), replayed.splitlines(), "the session's output",
                                      "the replay's output", lineterm=""))
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"... ({len(lines) - DIFF_LINES} more diff lines)"]
    return "\n".join(lines)


def _numbers(runs: list[int]) -> str:
    return f"run {runs[0]}" if len(runs) == 1 else f"runs {runs[0]} to {runs[-1]}"
